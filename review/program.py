"""Run the Pulumi program (__main__.py) in-process under mocks and record what it registers.

A custom mock monitor sees every RegisterResource request, so each recorded resource keeps
what the engine would receive: type, name, parent, inputs and dependency URNs (explicit
`depends_on` expanded by the SDK, plus property dependencies). The unit tests assert on
that graph, the end-to-end test executes its commands, and the offline render
(review/render.py) writes it out for review. Needs no CLI, state or credentials.

`ROOT` is the program's tree; tools that render another tree (a base commit) set it there.
"""

import base64
import copy
import hashlib
import json
import re
import runpy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi
import yaml
from google.protobuf import json_format
from pulumi.runtime import rpc
from pulumi.runtime.mocks import MockMonitor
from pulumi.runtime.proto import resource_pb2
from pulumi.runtime.settings import set_root_resource

ROOT = Path(__file__).resolve().parents[1]
PROJECT = "gpu-cluster"


@dataclass(frozen=True)
class Registration:
    """One RegisterResource request."""

    urn: str
    type: str
    name: str
    parent: str
    custom: bool
    inputs: dict
    dependencies: frozenset[str]
    delete_before_replace: bool
    replace_with: frozenset[str] = frozenset()
    aliases: tuple[str, ...] = ()
    """Earlier URNs of the resource (`aliases` option), as the SDK resolves them."""
    secret_paths: frozenset[str] = frozenset()
    """Dotted paths of the inputs that are secret."""
    retain_on_delete: bool = False
    ignore_changes: frozenset[str] = frozenset()
    """Input names (as the engine sees them, camelCase) whose old values a later update keeps."""
    deleted_with: str = ""
    """URN of the resource whose deletion makes this one's delete unnecessary."""
    additional_secret_outputs: frozenset[str] = frozenset()
    """Outputs the resource asks the engine to keep secret (camelCase)."""
    trigger_dependencies: frozenset[str] = frozenset()
    """URNs the `triggers` input is computed from (its property dependencies)."""
    engine_inputs: dict = field(default_factory=dict)
    """The inputs as the engine receives them: a host command's scripts as stubs naming the
    files of the host's script store (`inputs` has the whole texts they run)."""


@dataclass
class ProgramRun:
    """Everything one mocked run registered, in registration order, and its stack outputs."""

    resources: list[Registration] = field(default_factory=list)
    outputs: dict[str, Any] = field(default_factory=dict)
    # What the run was given: the real engine applies the same (tests/harness/engine_cluster.py).
    stack: str = "unit"
    config: dict[str, Any] = field(default_factory=dict)
    secrets: dict[str, str] = field(default_factory=dict)

    def by_name(self, name: str) -> Registration:
        found = [r for r in self.resources if r.name == name]
        assert len(found) == 1, f"expected one resource named {name!r}, found {len(found)}"
        return found[0]

    def of_type(self, type_: str) -> list[Registration]:
        return [r for r in self.resources if r.type == type_]

    @property
    def by_urn(self) -> dict[str, Registration]:
        return {r.urn: r for r in self.resources}

    def depends_on(self, resource: str, dependency: str) -> bool:
        """Whether `resource` waits for `dependency`, directly or through other resources."""
        by_urn, target = self.by_urn, self.by_name(dependency).urn
        seen, stack = set(), list(self.by_name(resource).dependencies)
        while stack:
            urn = stack.pop()
            if urn == target:
                return True
            if urn not in seen:
                seen.add(urn)
                stack.extend(by_urn[urn].dependencies if urn in by_urn else ())
        return False


def _ed25519_openssh(seed: bytes) -> dict[str, str]:
    """The outputs of a tls.PrivateKey (ED25519) made from `seed`: OpenSSH private and public key."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = Ed25519PrivateKey.from_private_bytes(seed)
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
    ).decode()
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()
    return {"privateKeyOpenssh": _fixed_check_int(private, seed), "publicKeyOpenssh": public + "\n"}


def _fixed_check_int(private: str, seed: bytes) -> str:
    """The OpenSSH encoding draws a random check-int (twice, at the start of the private
    section): fixed from `seed` here, so the same seed gives the same text every run."""
    lines = private.strip().splitlines()
    blob = bytearray(base64.b64decode("".join(lines[1:-1])))
    offset = len(b"openssh-key-v1\0")
    for _ in range(3):  # cipher name, KDF name, KDF options
        offset += 4 + int.from_bytes(blob[offset : offset + 4], "big")
    offset += 4  # number of keys
    offset += 4 + int.from_bytes(blob[offset : offset + 4], "big")  # the public key
    offset += 4  # the private section's length
    check = hashlib.sha256(seed).digest()[:4]
    blob[offset : offset + 8] = check + check
    body = base64.b64encode(bytes(blob)).decode()
    wrapped = [body[i : i + 70] for i in range(0, len(body), 70)]
    return "\n".join([lines[0], *wrapped, lines[-1]]) + "\n"


# The host size (components/host/host_size.py) a program run here measures, on every host: a
# small one, which any machine running a mocked run's commands has (the end-to-end tests
# measure their own machine instead: tests/conftest.py).
MEASURED_HOST = "memory_mb=16384 cpus=16\n"
GENERATED_SECRET = re.compile(r"head -c (\d+) /dev/urandom \| base64 -w0")


class _Mocks(pulumi.runtime.Mocks):
    """Resources echo their inputs as state; a command's stdout is empty, as in a preview."""

    def new_resource(self, args: pulumi.runtime.MockResourceArgs):
        state = dict(args.inputs)
        if args.typ in ("command:local:Command", "command:remote:Command"):
            state.setdefault("stdout", "")
            state.setdefault("stderr", "")
            if "host_size_create.sh" in str(args.inputs.get("create", "")):
                # No host to measure: nodes without memory_mb get their share of this one.
                state["stdout"] = MEASURED_HOST
        seed = hashlib.shake_256(f"{pulumi.get_stack()}:{args.name}".encode())
        generated = GENERATED_SECRET.fullmatch(str(args.inputs.get("create", "")))
        if args.typ == "command:local:Command" and generated:
            # A generated secret (components/common/transport.py): stable per stack and name, as the
            # engine keeps the command's stdout in the state.
            state["stdout"] = base64.b64encode(seed.digest(int(generated.group(1)))).decode()
        if args.typ == "tls:index/privateKey:PrivateKey":
            # A real key (the boot test logs in with it pinned), stable per stack and name.
            state.update(_ed25519_openssh(seed.digest(32)))
        if args.typ == "aws:ec2/instance:Instance":
            number = seed.digest(1)[0]
            state.setdefault("publicIp", f"198.51.100.{number}")
            state.setdefault("privateIp", args.inputs.get("privateIp"))
            state["primaryNetworkInterfaceId"] = f"eni-{seed.hexdigest(8)}"
        if args.typ == "aws:ec2/eip:Eip":
            state["publicIp"] = f"203.0.113.{seed.digest(1)[0]}"
            state["allocationId"] = f"eipalloc-{seed.hexdigest(8)}"
        if args.typ.startswith("aws:") and args.typ != "pulumi:providers:aws":
            state.setdefault("arn", f"{args.name}-arn")
        if args.typ == "aws:efs/mountTarget:MountTarget":
            state["ipAddress"] = f"10.80.1.{200 + seed.digest(1)[0] % 50}"
        if args.typ == "aws:ec2/keyPair:KeyPair":
            state["keyName"] = args.name
        return [f"{args.name}-id", state]

    def call(self, args: pulumi.runtime.MockCallArgs):
        if args.token == "aws:ec2/getSubnet:getSubnet":
            # An existing subnet: its zone is what the lookup adds.
            return {"id": args.args.get("id"), "availabilityZone": "us-east-1c"}
        return {}


class _RecordingMonitor(MockMonitor):
    def __init__(self, run: ProgramRun, stack: str):
        super().__init__(_Mocks())
        self.run = run
        self.stack = stack

    def make_urn(self, parent: str, type_: str, name: str) -> str:
        # The stack's own names, not the runtime settings': some SDK versions call the monitor
        # from a thread that does not see them, and URNs must match the ones the SDK computes
        # for aliases.
        if parent:
            type_ = parent.split("::")[2].split("$")[-1] + "$" + type_
        return "urn:pulumi:" + "::".join([self.stack, PROJECT, type_, name])

    # Without alias specs the SDK resolves every alias to a full URN itself. SDKs ask for the
    # monitor's features one by one (SupportsFeature) or all at once (GetDeploymentInfo).
    def SupportsFeature(self, request):  # noqa: N802 (gRPC method name)
        if request.id == "aliasSpecs":
            return type("SupportsFeatureResponse", (object,), {"hasSupport": False})
        return super().SupportsFeature(request)

    def GetDeploymentInfo(self, request):  # noqa: N802 (gRPC method name)
        info = super().GetDeploymentInfo(request)
        features = [f for f in info.supportedFeatures if f != resource_pb2.RESOURCE_MONITOR_FEATURE_ALIAS_SPECS]
        return resource_pb2.DeploymentInfo(supportedFeatures=features)

    def RegisterResource(self, request):  # noqa: N802 (gRPC method name)
        response = super().RegisterResource(request)
        if request.type != "pulumi:pulumi:Stack":
            engine_inputs = rpc.deserialize_properties(request.object) if request.custom else {}
            self.run.resources.append(
                Registration(
                    urn=response.urn,
                    type=request.type,
                    name=request.name,
                    parent=request.parent,
                    custom=request.custom,
                    inputs=_logical_inputs(engine_inputs),
                    engine_inputs=engine_inputs,
                    dependencies=frozenset(request.dependencies),
                    delete_before_replace=request.deleteBeforeReplace,
                    replace_with=frozenset(request.replace_with),
                    aliases=tuple(sorted(request.aliasURNs)),
                    secret_paths=frozenset(_secret_paths(json_format.MessageToDict(request.object))),
                    retain_on_delete=request.retainOnDelete,
                    ignore_changes=frozenset(request.ignoreChanges),
                    deleted_with=request.deletedWith,
                    additional_secret_outputs=frozenset(request.additionalSecretOutputs),
                    trigger_dependencies=frozenset(
                        request.propertyDependencies["triggers"].urns
                        if "triggers" in request.propertyDependencies
                        else ()
                    ),
                )
            )
        return response


def _logical_inputs(inputs: dict) -> dict:
    """The inputs with each script-store stub replaced by the whole text it runs (the program's
    own module, imported late: a tree rendered from before the store has none)."""
    inputs = {key: _archive_path(value) for key, value in inputs.items()}
    try:
        from components.common.script_store import logical_inputs
    except ImportError:
        return inputs
    return logical_inputs(inputs)


def _archive_path(value):
    """An archive or asset input (the script store's copy over SSH) as what the engine compares
    of it, its path: comparable, and printable as YAML or JSON."""
    if isinstance(value, pulumi.Archive | pulumi.Asset):
        return {"archive" if isinstance(value, pulumi.Archive) else "asset": getattr(value, "path", repr(value))}
    return value


SECRET_SIG = ("4dabf18193072939515e22adb298388d", "1b47061264138c4ac30d75fd1eb44270")


def _secret_paths(value, path: str = "") -> list[str]:
    """Dotted paths of the secret values in a serialized input object."""
    if isinstance(value, dict):
        if value.get(SECRET_SIG[0]) == SECRET_SIG[1]:
            return [path.lstrip(".")]
        return [p for key, item in value.items() for p in _secret_paths(item, f"{path}.{key}")]
    if isinstance(value, list):
        return [p for i, item in enumerate(value) for p in _secret_paths(item, f"{path}[{i}]")]
    return []


def stack_config(stack: str, directory: Path | None = None) -> dict[str, Any]:
    """The `gpu-cluster:*` keys of stacks/Pulumi.<stack>.yaml (or of `directory`'s), without the namespace."""
    document = yaml.safe_load(((directory or ROOT / "stacks") / f"Pulumi.{stack}.yaml").read_text())
    return {
        key.removeprefix(f"{PROJECT}:"): value
        for key, value in (document.get("config") or {}).items()
        if key.startswith(f"{PROJECT}:")
    }


def run_program(
    config: dict[str, Any], stack: str = "unit", main: Path | None = None, secrets: dict[str, str] | None = None
) -> ProgramRun:
    """Run __main__.py (or the program file `main`) for a stack whose `gpu-cluster:*` config is
    `config`, plus secret config values (`pulumi config set --secret KEY`) in `secrets`."""
    run = ProgramRun(stack=stack, config=copy.deepcopy(config), secrets=dict(secrets or {}))
    set_root_resource(None)
    monitor = _RecordingMonitor(run, stack)
    pulumi.runtime.set_mocks(_Mocks(), project=PROJECT, stack=stack, preview=False, monitor=monitor)
    secrets = secrets or {}
    pulumi.runtime.set_all_config(
        {f"{PROJECT}:{key}": json.dumps(value) for key, value in config.items()}
        | {f"{PROJECT}:{key}": value for key, value in secrets.items()},
        secret_keys=[f"{PROJECT}:{key}" for key in secrets],
    )

    @pulumi.runtime.test
    def program():
        runpy.run_path(str(main or ROOT / "__main__.py"), run_name="__main__")
        outputs = pulumi.runtime.get_root_resource().outputs
        return pulumi.Output.all(**outputs).apply(run.outputs.update)

    program()
    return run
