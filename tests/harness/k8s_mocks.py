"""Run the Kubernetes target under Pulumi mocks and record what it registers.

`run_build_kubernetes(config)` builds the target in-process with fresh mocks, waits for every
registration (pulumi.runtime.test waits for outstanding RPCs and for the Output it returns),
and hands back each registered resource (type, name, inputs as the engine receives them:
camelCase keys, numbers as floats) and the resolved stack outputs.
"""

from dataclasses import dataclass, field
from typing import Any

import pulumi
from pulumi.runtime.mocks import MockMonitor

from components.kubernetes.config import KubernetesConfig
from components.kubernetes.target import build_kubernetes


@dataclass(frozen=True)
class Registered:
    """One resource registration seen by the mocks."""

    type: str
    name: str
    inputs: dict
    provider: str
    dependencies: tuple[str, ...]
    """URNs this resource depends on, as in its RegisterResource request."""
    parent: str
    """URN of its parent resource."""


@dataclass
class RecordingMocks(pulumi.runtime.Mocks):
    """Mocks that record every new resource and echo its inputs back as its state."""

    resources: list[Registered] = field(default_factory=list)
    requests: dict[tuple[str, str], Any] = field(default_factory=dict)

    def new_resource(self, args: pulumi.runtime.MockResourceArgs):
        request = self.requests[(args.typ, args.name)]
        self.resources.append(
            Registered(
                type=args.typ,
                name=args.name,
                inputs=dict(args.inputs),
                provider=args.provider or "",
                dependencies=tuple(sorted(request.dependencies)),
                parent=request.parent,
            )
        )
        return [f"{args.name}-id", args.inputs]

    def call(self, args: pulumi.runtime.MockCallArgs):
        return {}


class RecordingMonitor(MockMonitor):
    """Mock monitor that keeps each request, for the dependencies and parent it names."""

    def __init__(self, mocks: RecordingMocks):
        super().__init__(mocks)
        self.recording = mocks

    def RegisterResource(self, request):  # noqa: N802 (the gRPC method it overrides)
        self.recording.requests[(request.type, request.name)] = request
        return super().RegisterResource(request)


@dataclass
class MockRun:
    """What one mocked run of build_kubernetes registered and exported."""

    resources: list[Registered]
    outputs: dict[str, Any]

    def kubernetes_resources(self) -> list[Registered]:
        """Registered custom resources of the kubernetes provider (no components)."""
        return [r for r in self.resources if r.type.startswith("kubernetes:")]

    def one(self, type_: str, name: str) -> Registered:
        """The single registered resource of that type and name."""
        found = [r for r in self.resources if r.type == type_ and r.name == name]
        assert len(found) == 1, f"expected one {type_} {name!r}, found {len(found)}"
        return found[0]

    def depends_on(self, resource: Registered, type_: str, name: str) -> bool:
        """Whether `resource`'s registration lists that resource among its dependencies."""
        return any(urn.endswith(f"{type_}::{name}") for urn in resource.dependencies)


def run_build_kubernetes(config: KubernetesConfig) -> MockRun:
    """Build the Kubernetes target under fresh mocks; return registrations and outputs."""
    mocks = RecordingMocks()
    pulumi.runtime.set_mocks(mocks, preview=False, monitor=RecordingMonitor(mocks))
    resolved: dict[str, Any] = {}

    @pulumi.runtime.test
    def program():
        outputs = build_kubernetes(config)
        keys = list(outputs)
        return pulumi.Output.all(*(outputs[k] for k in keys)).apply(
            lambda values: resolved.update(zip(keys, values, strict=True))
        )

    program()
    return MockRun(resources=mocks.resources, outputs=resolved)


def as_int(value: Any) -> Any:
    """Mocks turn numbers into floats; compare them as the ints the manifest had."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value
