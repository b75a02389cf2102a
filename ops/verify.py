"""Drift check of a stack's cluster on this host: `./verify.sh STACK [HOST]`; with `--gpu`,
the GPU acceptance check through Slurm instead (ops/verify_gpu.py).

pulumi-command cannot read back what its scripts made, so `pulumi refresh` sees no drift.
This renders the cluster's host state from stacks/Pulumi.STACK.yaml (the description the
boot unit uses) and runs host/files/verify_host.sh against it: bridges, addresses, ip_forward,
iptables rules by tag, containers and their owner marker, host daemons by pid and identity,
the munge key's permissions and the boot unit. Exit status 1 on any drift.
"""

import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

from components.common.transport import INTERPRETER, script
from components.composition.config import ClusterConfig
from components.composition.host_state import render_host_state
from components.composition.stack_config import NAMESPACE, ConfigError, parse_stack_config
from components.host.boot_unit import FILES

STACKS_DIR = Path(__file__).resolve().parents[1] / "stacks"


def stack_file_cluster(path: Path, stack: str) -> ClusterConfig:
    """The cluster config of the stack file at `path`, checked as `pulumi up` checks it."""
    document = yaml.safe_load(path.read_text()) or {}
    raw = {
        key.removeprefix(f"{NAMESPACE}:"): value
        for key, value in (document.get("config") or {}).items()
        if key.startswith(f"{NAMESPACE}:")
    }
    cluster = parse_stack_config(raw).cluster
    if cluster is None:
        raise ConfigError(f"stack {stack} builds no cluster ({NAMESPACE}:cluster is not set in {path})")
    return cluster


def stack_cluster(stack: str) -> ClusterConfig:
    return stack_file_cluster(STACKS_DIR / f"Pulumi.{stack}.yaml", stack)


def verify(cluster: ClusterConfig, host: str | None = None) -> subprocess.CompletedProcess:
    """Run the host check for a cluster (on this machine, as its host `host`: by default the
    only one); its report is on stdout."""
    with tempfile.NamedTemporaryFile("w", suffix=".env") as expected:
        expected.write(render_host_state(cluster, cluster.host_named(host) if host else None))
        expected.flush()
        return subprocess.run(
            [*INTERPRETER, script(FILES / "verify_host.sh"), "verify_host.sh", expected.name],
            capture_output=True,
            text=True,
            check=False,
        )


USAGE = (
    "usage: ./verify.sh STACK [HOST] [--gpu]   (HOST: the hosts[].name this machine is; --gpu: check every "
    "node's GPUs through Slurm instead of the host's state)"
)


def main(argv: list[str]) -> int:
    gpu = "--gpu" in argv
    argv = [arg for arg in argv if arg != "--gpu"]
    if len(argv) not in (1, 2) or any(arg.startswith("-") for arg in argv):
        print(USAGE, file=sys.stderr)
        return 2
    if not (STACKS_DIR / f"Pulumi.{argv[0]}.yaml").is_file():
        print(f"no stack {argv[0]}: stacks/Pulumi.{argv[0]}.yaml does not exist", file=sys.stderr)
        return 2
    try:
        cluster = stack_cluster(argv[0])
    except (ConfigError, OSError) as error:
        print(error, file=sys.stderr)
        return 2
    names = [h.name for h in cluster.cluster_hosts]
    host = argv[1] if len(argv) == 2 else None
    if host is None and cluster.multi_host and len(names) > 1:
        print(
            f"stack {argv[0]} has several hosts: ./verify.sh {argv[0]} HOST, run on that host ({names})",
            file=sys.stderr,
        )
        return 2
    if host is not None and host not in names:
        print(f"{host!r} is not one of the stack's hosts {names}", file=sys.stderr)
        return 2
    if gpu:
        from ops.verify_gpu import verify_gpus

        return verify_gpus(cluster, host)
    done = verify(cluster, host)
    sys.stdout.write(done.stdout)
    sys.stderr.write(done.stderr)
    return done.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
