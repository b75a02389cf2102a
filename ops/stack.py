"""What `status` knows of a stack without the cluster: its config (stacks/Pulumi.STACK.yaml),
its outputs (`./pulumi.sh stack output --json`) and its secrets (an SSH host's private key).

The outputs and config can be given as files (STATUS_OUTPUTS, STATUS_STACK_FILE): scripts and
tests then need no Pulumi CLI, and a cluster brought up some other way can be looked at too."""

import json
import os
import subprocess
from pathlib import Path

from components.composition.config import ClusterConfig
from components.composition.stack_config import NAMESPACE, ConfigError
from ops.verify import stack_file_cluster

ROOT = Path(__file__).resolve().parents[1]
PULUMI = ROOT / "pulumi.sh"


class StackNotUpError(Exception):
    """The stack has no outputs: never brought up, destroyed, or its state cannot be read."""


def stack_file(stack: str) -> Path:
    return Path(os.environ.get("STATUS_STACK_FILE") or ROOT / "stacks" / f"Pulumi.{stack}.yaml")


def stack_cluster(stack: str) -> ClusterConfig:
    """The stack's cluster config, checked as `pulumi up` checks it (ConfigError otherwise)."""
    try:
        return stack_file_cluster(stack_file(stack), stack)
    except OSError as error:
        raise ConfigError(f"no stack file for {stack}: {error}") from None


def _pulumi(stack: str, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(PULUMI), *argv, "--stack", stack], capture_output=True, text=True, timeout=120, check=False, cwd=ROOT
    )


def stack_outputs(stack: str) -> dict:
    """The stack's outputs (STATUS_OUTPUTS: a JSON file of them); StackNotUpError says why there are none."""
    given = os.environ.get("STATUS_OUTPUTS")
    if given:
        try:
            outputs = json.loads(Path(given).read_text())
        except (OSError, ValueError) as error:
            raise StackNotUpError(f"cannot read the outputs in STATUS_OUTPUTS={given}: {error}") from None
    else:
        try:
            done = _pulumi(stack, "stack", "output", "--json")
        except (OSError, subprocess.TimeoutExpired) as error:
            raise StackNotUpError(f"cannot run ./pulumi.sh stack output: {error}") from None
        if done.returncode != 0:
            why = (done.stderr.strip().splitlines() or ["no message"])[-1]
            if "no stack named" in why or ("unable to open bucket" in why and "no such file" in why):
                raise StackNotUpError(
                    f"stack {stack} is not up (the state in .pulumi-state/ has no such stack): "
                    f"./up.sh {stack} brings it up"
                )
            raise StackNotUpError(f"stack {stack}: ./pulumi.sh stack output failed: {why}")
        outputs = json.loads(done.stdout or "{}")
    if not outputs:
        raise StackNotUpError(f"stack {stack} is not up (it has no outputs): ./up.sh {stack} brings it up")
    return outputs


def stack_secret(stack: str, name: str) -> str:
    """A secret of the stack's config (an SSH host's private key); STATUS_SECRET_<name> overrides."""
    given = os.environ.get(f"STATUS_SECRET_{name}")
    if given is not None:
        return given
    done = _pulumi(stack, "config", "get", f"{NAMESPACE}:{name}")
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise LookupError(f"the stack secret {name} cannot be read ({why})")
    return done.stdout
