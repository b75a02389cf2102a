"""Drift check of a stack's cluster on this host: `./verify.sh STACK`.

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

from components.config import ClusterConfig
from components.host.boot_unit import FILES, render_host_state
from components.stack_config import NAMESPACE, ConfigError, parse_stack_config
from components.transport import INTERPRETER, script

STACKS_DIR = Path(__file__).resolve().parents[2] / "stacks"


def stack_cluster(stack: str) -> ClusterConfig:
    document = yaml.safe_load((STACKS_DIR / f"Pulumi.{stack}.yaml").read_text()) or {}
    raw = {
        key.removeprefix(f"{NAMESPACE}:"): value
        for key, value in (document.get("config") or {}).items()
        if key.startswith(f"{NAMESPACE}:")
    }
    cluster = parse_stack_config(raw).cluster
    if cluster is None:
        raise ConfigError(f"stack {stack} builds no local cluster ({NAMESPACE}:cluster is not set)")
    return cluster


def verify(cluster: ClusterConfig) -> subprocess.CompletedProcess:
    """Run the host check for a cluster; its report is on stdout."""
    with tempfile.NamedTemporaryFile("w", suffix=".env") as expected:
        expected.write(render_host_state(cluster))
        expected.flush()
        return subprocess.run(
            [*INTERPRETER, script(FILES / "verify_host.sh"), "verify_host.sh", expected.name],
            capture_output=True,
            text=True,
            check=False,
        )


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: ./verify.sh STACK", file=sys.stderr)
        return 2
    try:
        cluster = stack_cluster(argv[0])
    except (ConfigError, OSError) as error:
        print(error, file=sys.stderr)
        return 2
    done = verify(cluster)
    sys.stdout.write(done.stdout)
    sys.stderr.write(done.stderr)
    return done.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
