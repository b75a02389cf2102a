"""How many resource operations `pulumi up` (and preview, destroy, refresh) runs at once for a
stack: the cluster's, not the machine's cores.

The pinned CLI (3.253) runs at most `--parallel` steps at once; without the flag, $PULUMI_PARALLEL
(a positive integer), else 4 x GOMAXPROCS, which is the machine's cores (pkg/cmd/pulumi/
operations/up.go, `defaultParallel`): 8 on two cores. A cluster's steps mostly wait (a node's
container boots, its slurmd registers), so 64 node creates queued 8 at a time leave the CPU idle.

The rule: nodes + 16. Every node's steps run one after the other (its container, then its
slurmd), and every node's can run beside the others'; 16 leave room for the cluster-wide steps
that can run beside them (a host's packages, bridges and image, the web app's, login's and
accounting's containers, a second host's own). A stack without cluster nodes (the Kubernetes one)
gets 16.

An explicit `--parallel`/`-p` argument, then $PULUMI_PARALLEL, win: the CLI's own order. ./pulumi.sh
(and so ./up.sh and ./down.sh) and the CI deploy run this:

    venv/bin/python tools/parallelism.py PULUMI_ARGS...

prints the value to export as PULUMI_PARALLEL (nothing where the arguments or the environment
already give one, or no choice could be made) and, on stderr, one line saying what runs at once
and why.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BESIDE_NODES = 16
# The CLI commands that take --parallel (the engine's step executor).
COMMANDS = ("up", "update", "preview", "destroy", "refresh")
MAX_INT32 = 2**31 - 1  # the CLI's "unbounded" (math.MaxInt32)


def for_config(config: dict) -> tuple[int, str]:
    """(parallelism, why) for a stack's `gpu-cluster` config (`{"cluster": {...}, ...}`)."""
    cluster = config.get("cluster")
    nodes = (cluster.get("nodes") or []) if isinstance(cluster, dict) else []
    if not isinstance(nodes, list) or not nodes:
        return BESIDE_NODES, "no cluster nodes"
    return len(nodes) + BESIDE_NODES, f"{len(nodes)} nodes + {BESIDE_NODES}: every node's steps can run together"


def for_stack_file(path: Path) -> tuple[int, str]:
    """(parallelism, why) for a stack file (stacks/Pulumi.STACK.yaml)."""
    import yaml  # the venv's; imported here so the argument checks above need nothing

    document = yaml.safe_load(path.read_text()) or {}
    values = document.get("config") or {}
    config = {
        key.removeprefix("gpu-cluster:"): value for key, value in values.items() if key.startswith("gpu-cluster:")
    }
    return for_config(config)


def given(args: list[str]) -> str | None:
    """The value of an explicit --parallel/-p in pulumi's arguments, else None."""
    for i, arg in enumerate(args):
        if arg == "--":
            return None
        if arg in ("--parallel", "-p"):
            return args[i + 1] if i + 1 < len(args) else ""
        if arg.startswith("--parallel="):
            return arg.removeprefix("--parallel=")
        # Short flags together (-yp 8, -p8, -p=8): p is the only one of them that takes a value.
        short = re.match(r"^-([A-Za-z]*)p(=?)(.*)$", arg)
        if short and not arg.startswith("--"):
            return short.group(3) or (args[i + 1] if i + 1 < len(args) else "")
    return None


def option(args: list[str], *names: str) -> str | None:
    for i, arg in enumerate(args):
        if arg == "--":
            break
        if arg in names and i + 1 < len(args):
            return args[i + 1]
        for name in names:
            if name.startswith("--") and arg.startswith(f"{name}="):
                return arg.split("=", 1)[1]
    return None


def env_parallel(environ: dict) -> int | None:
    """$PULUMI_PARALLEL as the CLI reads it: a positive integer counts, anything else is unset."""
    try:
        value = int(environ.get("PULUMI_PARALLEL", ""), 10)
    except ValueError:
        return None
    return min(value, MAX_INT32) if value > 0 else None


def stack_file(args: list[str], root: Path, environ: dict) -> Path | None:
    """The stack file the command's stack reads: --config-file, else stacks/Pulumi.STACK.yaml
    of --stack (a fully qualified org/project/stack names its last part), else of the stack
    selected (`pulumi stack --show-name`)."""
    config_file = option(args, "--config-file")
    if config_file:
        return Path(config_file) if Path(config_file).is_absolute() else root / config_file
    stack = option(args, "--stack", "-s")
    if stack is None:
        shown = subprocess.run(
            ["pulumi", "stack", "--show-name"], cwd=root, env=environ, capture_output=True, text=True, check=False
        )
        stack = shown.stdout.strip() if shown.returncode == 0 else ""
    if not stack:
        return None
    return root / "stacks" / f"Pulumi.{stack.rsplit('/', 1)[-1]}.yaml"


def choose(args: list[str], root: Path = ROOT, environ: dict | None = None) -> tuple[int | None, str]:
    """(the value to export as PULUMI_PARALLEL, or None to leave the CLI's; the line to say)."""
    environ = dict(os.environ if environ is None else environ)
    command = args[0] if args else ""
    verb = f"pulumi {command}"
    explicit = given(args[1:])
    if explicit is not None:
        return None, f"{verb}: --parallel {explicit} steps at once (given)"
    from_env = env_parallel(environ)
    if from_env is not None:
        return None, f"{verb}: {from_env} steps at once (PULUMI_PARALLEL)"
    path = stack_file(args[1:], root, environ)
    try:
        if path is None:
            raise FileNotFoundError("no stack selected")
        value, why = for_stack_file(path)
    except Exception as error:  # noqa: BLE001 (the CLI's default is a safe fallback)
        return None, f"{verb}: the CLI's default steps at once (4 x the cores): no stack file to size it by ({error})"
    return value, f"{verb}: {value} steps at once ({why}; PULUMI_PARALLEL or --parallel N to change)"


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in COMMANDS:
        return 0  # a command without --parallel: nothing to choose, nothing to say
    value, line = choose(argv)
    print(line, file=sys.stderr)
    if value is not None:
        print(value)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
