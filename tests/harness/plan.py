"""The plan the Pulumi engine would make to go from a recorded graph to a new one.

A graph is a list of resource records (`records(run)`): URN, type, name, parent URN, custom,
delete_before_replace, inputs, aliases. The engine's rules, as far as they decide what
happens to a resource that already exists:
  - a new resource takes over the old one with the same URN, or else the one one of its
    `aliases` names, or else (parent taken over through an alias) the one with its own type
    and name (or an alias's) under the parent's old URN, a name prefixed with the parent's
    name prefixed with the parent's old name instead, as the engine derives them; nothing
    matched: create. An old resource nobody took over: delete.
  - taken over by URN but with another type or parent: replace (an alias makes a move safe).
  - an input its provider replaces on (pulumi-command: `triggers`; Kubernetes: the object's
    name or namespace) changed: replace; any other input changed: update; else same.
Components (custom false) have no inputs: they are only ever same, create or delete.
"""

from dataclasses import dataclass, field
from typing import Any

# Inputs whose change makes the provider replace the resource instead of updating it.
REPLACE_ON_CHANGE = {
    "command:local:Command": ("triggers",),
    "command:remote:Command": ("triggers",),
}
KUBERNETES_REPLACE_ON_CHANGE = ("metadata.name", "metadata.namespace")

ACTIONS = ("same", "update", "replace", "create", "delete")


@dataclass(frozen=True)
class Step:
    urn: str
    action: str
    old_urn: str | None = None
    changed: tuple[str, ...] = field(default=())
    """Top-level inputs that differ (update, replace), or why it is replaced."""


def _normalize(urn: str) -> str:
    # The mock monitor puts the stack's type in the chain of its children's URNs; the engine
    # (and the SDK when it resolves aliases) does not. It also chains only the parent's own
    # type, where the engine (and an alias the SDK resolves from a parent URN) chains every
    # ancestor's: both are compared by the last two links.
    urn = urn.replace("::pulumi:pulumi:Stack$", "::")
    if urn.count("::") < 3:
        return urn
    head, chain, name = urn.rsplit("::", 2)
    return f"{head}::{'$'.join(chain.split('$')[-2:])}::{name}"


def _normalized(record: dict) -> dict:
    return {
        **record,
        "urn": _normalize(record["urn"]),
        "parent": _normalize(record["parent"]) if record.get("parent") else record.get("parent"),
        "aliases": [_normalize(alias) for alias in record.get("aliases", ())],
    }


def records(run) -> list[dict[str, Any]]:
    """The comparable record of every resource of a ProgramRun, sorted by URN."""
    return sorted(
        (
            {
                "urn": _normalize(r.urn),
                "type": r.type,
                "name": r.name,
                "parent": _normalize(r.parent),
                "custom": r.custom,
                "delete_before_replace": r.delete_before_replace,
                "inputs": r.inputs,
                "aliases": [_normalize(alias) for alias in r.aliases],
            }
            for r in run.resources
        ),
        key=lambda record: record["urn"],
    )


def _lookup(inputs: dict, dotted: str) -> Any:
    value: Any = inputs
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def _replace_keys(type_: str) -> tuple[str, ...]:
    if type_.startswith("kubernetes:"):
        return KUBERNETES_REPLACE_ON_CHANGE
    return REPLACE_ON_CHANGE.get(type_, ())


def _child_urn(parent_urn: str, type_: str, name: str) -> str:
    """The URN a child of `parent_urn` with this type and name has."""
    stack, project, parent_type, _ = parent_urn.split("::", 3)
    chain = type_ if parent_type == "pulumi:pulumi:Stack" else f"{parent_type}${type_}"
    return _normalize(f"{stack}::{project}::{chain}::{name}")


def _inherited(record: dict, parent_was: str) -> list[str]:
    """The aliases the engine derives for a child of a parent taken over through an alias
    (step_generator.go generateAliases): the child's own type and name, and each of its own
    aliases' types and names, under the parent's old URN; a name that starts with the parent's
    name starts with the parent's old name instead (`<parent>-details`, the naming convention)."""
    parent_name = record["parent"].rsplit("::", 1)[1]
    old_parent_name = parent_was.rsplit("::", 1)[1]

    def under_old_parent(type_: str, name: str) -> str:
        if name.startswith(parent_name):
            name = old_parent_name + name[len(parent_name) :]
        return _child_urn(parent_was, type_, name)

    own = [(alias.split("::")[2].split("$")[-1], alias.rsplit("::", 1)[1]) for alias in record.get("aliases", ())]
    return [under_old_parent(type_, name) for type_, name in [(record["type"], record["name"]), *own]]


def _depth(record: dict) -> tuple[int, str]:
    return record["urn"].split("::")[2].count("$"), record["urn"]


def plan(old: list[dict], new: list[dict]) -> list[Step]:
    """One step per resource of either graph, in URN order."""
    old, new = [_normalized(record) for record in old], [_normalized(record) for record in new]
    by_urn = {record["urn"]: record for record in old}
    taken: dict[str, str] = {}  # new URN -> the old URN it took over
    steps = []
    for record in sorted(new, key=_depth):  # parents first: children inherit their aliases
        candidates = [record["urn"], *record.get("aliases", ())]
        parent_was = taken.get(record["parent"], record["parent"])
        if parent_was != record["parent"]:
            candidates += _inherited(record, parent_was)
        previous = next((by_urn[c] for c in candidates if c in by_urn and c not in taken.values()), None)
        if previous is None:
            steps.append(Step(record["urn"], "create"))
            continue
        taken[record["urn"]] = previous["urn"]
        via_alias = previous["urn"] != record["urn"]
        moved = [key for key, now in (("type", record["type"]), ("parent", parent_was)) if previous[key] != now]
        if moved and not via_alias:
            steps.append(Step(record["urn"], "replace", previous["urn"], tuple(moved)))
            continue
        old_inputs, new_inputs = previous["inputs"], record["inputs"]
        keys = old_inputs.keys() | new_inputs.keys()
        changed = tuple(sorted(k for k in keys if old_inputs.get(k) != new_inputs.get(k)))
        replacing = tuple(k for k in _replace_keys(record["type"]) if _lookup(old_inputs, k) != _lookup(new_inputs, k))
        if replacing:
            steps.append(Step(record["urn"], "replace", previous["urn"], replacing))
        elif changed:
            steps.append(Step(record["urn"], "update", previous["urn"], changed))
        else:
            steps.append(Step(record["urn"], "same", previous["urn"]))
    gone = set(by_urn) - set(taken.values())
    steps += [Step(urn, "delete", urn) for urn in gone]
    return sorted(steps, key=lambda step: step.urn)


def summary(steps: list[Step]) -> dict[str, int]:
    """How many resources each action touches, e.g. {'same': 40, 'update': 0, ...}."""
    return {action: sum(1 for step in steps if step.action == action) for action in ACTIONS}
