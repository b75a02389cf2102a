"""The Kubernetes config's building blocks: named rules run together (RuledModel) and the
field types (names, labels, pinned images, whole GPUs, quantities, ports)."""

import re
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Annotated, Any, ClassVar

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    StringConstraints,
    model_validator,
)

from components.common.config_types import StrictModel

Rule = Callable[[Any], Iterator[str]]


def run_rules(model: Any, rules: tuple[Rule, ...]) -> None:
    """Run every rule and raise one ValueError listing all the problems they found.

    One problem per line, each starting with the field it is about (relative to the model),
    so the stack-config loader can prefix the model's own path to every line.
    """
    problems = [problem for rule in rules for problem in rule(model)]
    if problems:
        raise ValueError("\n".join(problems))


class RuledModel(StrictModel):
    """A StrictModel whose cross-field checks are the named rule functions in `RULES`."""

    RULES: ClassVar[tuple[Rule, ...]] = ()

    @model_validator(mode="after")
    def _check_rules(self):
        run_rules(self, self.RULES)
        return self


# --- field types -------------------------------------------------------------------------

# RFC 1123 label: valid for namespaces, Services (also an RFC 1035 label, since it starts
# with a letter), Deployments, Jobs, Pods, Helm release names and container names.
K8sName = Annotated[
    str,
    StringConstraints(pattern=r"^[a-z]([-a-z0-9]*[a-z0-9])?$", max_length=63),
    Field(description="Kubernetes object name: a-z, 0-9 and '-', starting with a letter, <= 63"),
]

# Label key: optional DNS-subdomain prefix and '/', then a name of at most 63 characters.
LabelKey = Annotated[
    str,
    StringConstraints(
        pattern=r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
        r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$",
        max_length=317,
    ),
    Field(description="label key such as 'nvidia.com/gpu.present' or 'sku'"),
]

LabelValue = Annotated[
    str,
    StringConstraints(pattern=r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$"),
    Field(description="label value: empty, or <= 63 of A-Z a-z 0-9 - _ . (alphanumeric ends)"),
]


def _check_pinned_image(value: str) -> str:
    # A moving tag makes two applies of the same stack run different software, and a
    # preview cannot show the change. Only a version tag or a digest says what runs.
    if "@sha256:" in value:
        return value
    last = value.rsplit("/", 1)[-1]
    if ":" not in last:
        raise ValueError(
            f"image {value!r} has no tag: pin a version tag "
            "(e.g. nvidia/cuda:12.4.1-base-ubuntu22.04) or a @sha256: digest"
        )
    if last.rsplit(":", 1)[1] == "latest":
        raise ValueError(f"image {value!r} uses the moving tag 'latest': pin a version tag or a @sha256: digest")
    return value


ImageRef = Annotated[
    str,
    StringConstraints(pattern=r"^[a-z0-9][A-Za-z0-9._/:@-]*$", max_length=255),
    AfterValidator(_check_pinned_image),
    Field(description="container image with a pinned tag or @sha256 digest (not ':latest')"),
]


def _whole_gpus(value: Any) -> Any:
    # nvidia.com/gpu is an extended resource: Kubernetes only accepts whole numbers for it,
    # and a GPU is never shared between containers this way. Refuse 0.5 here, by name,
    # rather than letting the API server reject the Pod at apply time. ValueError, not
    # TypeError: pydantic reports only the former as a validation error with a field path.
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(
            f"nvidia.com/gpu takes whole GPUs only: {value!r} is not an integer; "
            "use 1, 2, ... (a GPU cannot be split between containers)"
        )
    return value


GpuCount = Annotated[
    int,
    BeforeValidator(_whole_gpus),
    Field(
        ge=1,
        le=16,
        description="whole GPUs requested as the nvidia.com/gpu limit, 1-16",
    ),
]

CpuQuantity = Annotated[
    str,
    StringConstraints(pattern=r"^[0-9]+(\.[0-9]+)?m?$"),
    Field(description="CPU quantity: cores ('2', '0.5') or millicores ('500m')"),
]

MemoryQuantity = Annotated[
    str,
    StringConstraints(pattern=r"^[0-9]+(\.[0-9]+)?(k|M|G|T|Ki|Mi|Gi|Ti)?$"),
    Field(description="memory quantity such as '512Mi', '4Gi' or '1G'"),
]

NodePort = Annotated[
    int,
    Field(
        ge=30000,
        le=32767,
        description="Service nodePort, in the default range 30000-32767",
    ),
]

ChartVersion = Annotated[
    str,
    StringConstraints(pattern=r"^v?[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$"),
    Field(description="exact Helm chart version such as 'v25.3.0' (no ranges, no 'latest')"),
]

_QUANTITY_SUFFIX = {
    "": Decimal(1),
    "m": Decimal("0.001"),
    "k": Decimal(10**3),
    "M": Decimal(10**6),
    "G": Decimal(10**9),
    "T": Decimal(10**12),
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
}


def quantity_value(quantity: str) -> Decimal:
    """The number a CPU or memory quantity stands for ('500m' -> 0.5, '1Ki' -> 1024)."""
    match = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?)([A-Za-z]*)", quantity)
    if match is None or match[2] not in _QUANTITY_SUFFIX:
        raise ValueError(f"{quantity!r} is not a CPU or memory quantity")
    return Decimal(match[1]) * _QUANTITY_SUFFIX[match[2]]
