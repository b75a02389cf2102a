"""The burst reconciler (a timer on the controller, every minute): what Slurm and EC2 disagree
on, after a grace time.

- An instance tagged with the cluster whose node is not powered up (or not a node at all) is
  an orphan, billed for nothing: terminated once older than orphan_grace_s.
- A second instance of one node: all but the one the node registered from are terminated.
- A node powering up whose instance is gone (terminated, never launched) is set DOWN and
  powered down, back to the pool, once its launch is older than the grace time. Its launch
  time is the resume program's record (made before its CreateFleet); a node powering up with
  no record (a resume not yet this far) counts from the first time the reconciler sees it so.
- A node left DOWN and powered down (a failed resume, a capacity error whose skip is over)
  is returned to the pool, unless its boot failed: a boot that fails (a users[] clash, a
  wrong image) fails again on the next, billed instance. The boot's reason (`burst boot: ...`)
  is seen while the node waits for ResumeTimeout, which then replaces it ("ResumeTimeout
  reached"); it is kept in the state directory and set back, and the node stays DOWN until
  the operator returns it (`scontrol update nodename=<node> state=resume`)."""

import sys
import time
from datetime import datetime

from burst_common import (
    Slurm,
    StateFile,
    ec2_client,
    instances_of,
    load_config,
    logger,
    skipped_types,
    state_flags,
    tag,
)

POWERED_OFF = {"POWERED_DOWN", "POWERING_DOWN"}
BOOT_FAILED = "burst boot:"  # boot_node.sh's reason for a failed boot


def _reason(fields: dict) -> str:
    """A node's reason without the `[user@time]` scontrol appends."""
    reason = fields.get("Reason", "")
    return reason.rsplit(" [", 1)[0] if reason.endswith("]") and " [" in reason else reason


def _age(instance: dict, now: float) -> float:
    launched = instance["LaunchTime"]
    if isinstance(launched, str):
        launched = datetime.fromisoformat(launched.replace("Z", "+00:00"))
    return now - launched.timestamp()


def main(argv: list[str], slurm: Slurm | None = None, ec2=None, now: float | None = None) -> int:
    config = load_config()
    log = logger(config, "reconcile")
    slurm = slurm or Slurm(config)
    ec2 = ec2 or ec2_client(config)
    now = time.time() if now is None else now
    grace = config["orphan_grace_s"]
    burst_nodes = {n for p in config["partitions"] for n in p["nodes"]}
    nodes = {name: fields for name, fields in slurm.nodes().items() if name in burst_nodes}
    instances = instances_of(ec2, config, states=["pending", "running"])

    by_node: dict[str, list[dict]] = {}
    for instance in instances:
        by_node.setdefault(tag(instance, "gpucluster:node") or "", []).append(instance)
    doomed = []
    for node, owned in by_node.items():
        fields = nodes.get(node)
        up = fields is not None and not (state_flags(fields) & POWERED_OFF)
        old = [i for i in owned if _age(i, now) > grace]
        if not up:
            doomed += [(i, f"orphan of {node or 'no node'}") for i in old]
        elif len(owned) > 1:
            keep = next((i for i in owned if i.get("PrivateIpAddress") == fields.get("NodeAddr")), None)
            keep = keep or min(owned, key=lambda i: _age(i, now))  # else the newest
            doomed += [(i, f"second instance of {node}") for i in old if i is not keep]
    if doomed:
        ec2.terminate_instances(InstanceIds=[i["InstanceId"] for i, _ in doomed])
        for instance, why in doomed:
            log.warning("terminated %s: %s", instance["InstanceId"], why)

    with StateFile(config, "launches.json").locked() as launches:
        for node, fields in nodes.items():
            if "POWERING_UP" not in state_flags(fields):
                launches.pop(node, None)  # its launch is over: the next power up records anew
            elif node not in by_node:
                launches.setdefault(node, now)  # no launch recorded yet: counted from now
    with StateFile(config, "boot-failures.json").locked() as boot_failures:
        for node, fields in nodes.items():
            if "DOWN" not in state_flags(fields):
                boot_failures.pop(node, None)  # returned to service: its next boot is watched anew
            elif _reason(fields).startswith(BOOT_FAILED):
                boot_failures[node] = _reason(fields)
    capacity_wait = bool(skipped_types(config, now))
    for node, fields in nodes.items():
        flags = state_flags(fields)
        if node in by_node or "CLOUD" not in flags:
            continue
        if "POWERING_UP" in flags and now - launches[node] > grace:
            log.warning("%s: powering up without an instance: back to the pool", node)
            slurm.update([node], state="down", reason="burst: instance gone while powering up")
            slurm.update([node], state="power_down_force")
        elif "DOWN" in flags and "POWERED_DOWN" in flags:
            if fields.get("Reason", "").startswith("burst: no capacity") and capacity_wait:
                continue  # its reason says when it is tried again
            if node in boot_failures:  # for the operator, with the boot's reason
                if _reason(fields) != boot_failures[node]:
                    log.warning("%s: its boot failed, left DOWN: %s", node, boot_failures[node])
                    slurm.update([node], state="down", reason=boot_failures[node])
                continue
            log.info("%s: down and powered down without an instance: back to the pool", node)
            slurm.update([node], state="resume")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
