"""Slurm's SuspendProgram (and, with --failed, its ResumeFailProgram): terminate the nodes'
instances by tag. A suspended node goes back to the cloud pool at once (`state=resume`,
instead of waiting out SuspendTimeout); a node that failed to resume stays DOWN with Slurm's
reason, and the reconciler returns it once its instance is gone."""

import sys

from burst_common import Slurm, ec2_client, instances_of, load_config, logger


def main(argv: list[str], slurm: Slurm | None = None, ec2=None) -> int:
    failed = "--failed" in argv
    hostlist = next(a for a in argv[1:] if a != "--failed")
    config = load_config()
    log = logger(config, "resume-fail" if failed else "suspend")
    slurm = slurm or Slurm(config)
    nodes = slurm.hostnames(hostlist)
    ec2 = ec2 or ec2_client(config)
    ids = [i["InstanceId"] for i in instances_of(ec2, config, nodes)]
    if ids:
        ec2.terminate_instances(InstanceIds=ids)
    log.info("%s %s: terminated %s", "failed" if failed else "suspend", ",".join(nodes), ",".join(ids) or "none")
    if not failed:
        slurm.update(nodes, state="resume")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
