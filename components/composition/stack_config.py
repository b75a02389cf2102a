"""The whole stack config: every key of the `gpu-cluster` namespace, parsed once, up front.

`load_stack_config` runs before any resource is registered, so a bad stack file stops
`pulumi up` / `pulumi preview` with a list of `field: reason` lines and changes nothing.
"""

from collections.abc import Mapping
from typing import Any

import pulumi
from pydantic import ValidationError, model_validator

from components.common.config_types import StrictModel
from components.composition.config import ClusterConfig
from components.composition.config_rules_beside_errors import with_rules_beside
from components.kubernetes.config import KubernetesConfig

NAMESPACE = "gpu-cluster"


class StackConfig(StrictModel):
    """A stack builds a local cluster, a Kubernetes target, or both."""

    cluster: ClusterConfig | None = None
    kubernetes: KubernetesConfig | None = None

    @model_validator(mode="after")
    def _check_something_to_build(self) -> "StackConfig":
        if self.cluster is None and self.kubernetes is None:
            raise ValueError(f"nothing to build: set {NAMESPACE}:cluster and/or {NAMESPACE}:kubernetes")
        return self


class ConfigError(pulumi.RunError):
    """Raised for an invalid stack config; its message lists every problem, one per line.

    A `pulumi.RunError`, so `pulumi up` prints the message alone, without a Python traceback."""


def _location(loc: tuple) -> str:
    path = ""
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
    return path.lstrip(".")


def _format(details: list[dict]) -> str:
    """One `  - field: reason` line per problem (pydantic's error details), with the field's full path."""
    lines = []
    for detail in details:
        location = _location(detail["loc"])
        for line in detail["msg"].removeprefix("Value error, ").splitlines():
            if detail["type"] == "value_error" and line.split(" ", 1)[0].endswith(":"):
                # A cross-field rule names its field relative to the model it checks.
                lines.append(f"{location}.{line}" if location else line)
            else:
                lines.append(f"{location}: {line}" if location else line)
    return "\n".join(f"  - {line}" for line in lines)


def problems(raw: dict, error: ValidationError) -> tuple[list[dict], int]:
    """Every field error of `raw`, then what the cross-field rules whose inputs are valid find;
    and how many rules read an invalid field and were not checked."""
    return with_rules_beside(StackConfig, raw, error)


def unchecked_note(skipped: int) -> list[str]:
    """The line saying that rules across fields wait for the fields they read, if any do."""
    if not skipped:
        return []
    return [
        f"  ({skipped} rule(s) across fields, e.g. addresses inside subnets and GPU counts, read a field above"
        " and are checked once these are fixed: more may follow)"
    ]


def parse_stack_config(raw: Mapping[str, Any]) -> StackConfig:
    """Validate a mapping of namespace keys (without the `gpu-cluster:` prefix)."""
    try:
        return StackConfig.model_validate(dict(raw))
    except ValidationError as error:
        details, skipped = problems(dict(raw), error)
        lines = [_format(details), *unchecked_note(skipped)]
        raise ConfigError(f"invalid stack config ({NAMESPACE}):\n" + "\n".join(lines)) from None


def named_secrets(stack: StackConfig) -> list[tuple[str, str]]:
    """(field, secret name) of every stack secret the config names (the hosts' private keys)."""
    hosts = (stack.cluster.hosts or []) if stack.cluster else []
    return [
        (f"cluster.hosts[{i}].connection.private_key_secret", host.connection.private_key_secret)
        for i, host in enumerate(hosts)
        if host.is_ssh
    ]


def missing_secrets(stack: StackConfig, keys: set[str]) -> str | None:
    """The error for the secrets the config names that the stack does not hold, if any."""
    lines = [
        f"  - {field}: the stack has no secret {name!r}; set it with "
        f"`./pulumi.sh config set --secret {name} --stack {pulumi.get_stack()} < PRIVATE_KEY_FILE`"
        for field, name in named_secrets(stack)
        if f"{NAMESPACE}:{name}" not in keys
    ]
    return f"missing stack secrets ({NAMESPACE}):\n" + "\n".join(lines) if lines else None


def load_stack_config() -> StackConfig:
    """Read every `gpu-cluster:*` key of the current stack, so unknown keys are caught too, and
    check that every secret it names is there, before any resource is registered."""
    prefix = f"{NAMESPACE}:"
    keys = set(pulumi.runtime.config.CONFIG.get()) | set(pulumi.runtime.config.get_config_env())
    config = pulumi.Config(NAMESPACE)
    # Secrets (an SSH host's private key) are read where they are used, never parsed here.
    raw = {
        key.removeprefix(prefix): config.get_object(key.removeprefix(prefix))
        for key in sorted(keys)
        if key.startswith(prefix) and not pulumi.runtime.config.is_config_secret(key)
    }
    stack = parse_stack_config(raw)
    problem = missing_secrets(stack, keys)
    if problem:
        raise ConfigError(problem)
    return stack
