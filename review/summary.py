"""What a reviewer reads first: a stack's change counts, a banner when jobs would die, PR labels.

Built from the engine's own events (`pulumi.automation.events.EngineEvent`, as `stack.preview(
on_event=...)` delivers them, or as JSON lines of an event log, parsed by the SDK's `from_json`).
The comment it writes is scrubbed of key-shaped text (review/scrub.py) and carries a marker,
so the workflow edits one comment per stack in place.

    python -m review.summary STACK --out DIR [--events EVENTS.jsonl] [--preview PREVIEW.txt] [--diff RENDER.diff]

writes DIR/comment.md and DIR/labels (one label per line).
"""

import argparse
import json
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from pulumi.automation.events import EngineEvent, OpType

from review.scrub import scrub

COUNTED = (OpType.CREATE, OpType.UPDATE, OpType.REPLACE, OpType.DELETE)
# The halves of a replacement are shown as the replace itself.
HIDDEN = {OpType.SAME, OpType.CREATE_REPLACEMENT, OpType.DELETE_REPLACED, OpType.READ, OpType.REFRESH}
DESTRUCTIVE = {OpType.REPLACE, OpType.DELETE}
HOST_PART = "gpu-cluster:cluster:HostPart"
LIMIT = 64_000  # GitHub refuses comments over 65,536 characters
MARKER = "<!-- gpu-cluster-review:{stack} -->"


def _types(urn: str) -> list[str]:
    """The qualified type of a URN: its parent's type, then its own."""
    return urn.split("::")[2].split("$") if urn.count("::") >= 3 else []


def _is_host_part(urn: str) -> bool:
    return _types(urn)[-1:] == [HOST_PART]


@dataclass(frozen=True)
class Change:
    op: OpType
    urn: str
    keys: tuple[str, ...] = ()
    ancestors: tuple[str, ...] = ()
    """URNs of the parent, grandparent, ... as far as the events name them."""

    @property
    def name(self) -> str:
        return self.urn.rsplit("::", 1)[-1]

    @property
    def types(self) -> list[str]:
        """Every type from the root down to the resource's own (last)."""
        found: list[str] = []
        for urn in [*reversed(self.ancestors), self.urn]:
            found.extend(t for t in _types(urn) if t not in found)
        return found

    @property
    def host_part(self) -> str | None:
        """The name of the host part (components/composition/host_part.py) the resource is, or is inside."""
        return next((urn.rsplit("::", 1)[-1] for urn in (self.urn, *self.ancestors) if _is_host_part(urn)), None)

    def kills_jobs(self) -> str | None:
        """What running jobs lose when this change is a replace or delete, or None."""
        if self.op not in DESTRUCTIVE:
            return None
        types = self.types
        if "gpu-cluster:lxc:NodeImage" in types:
            return "the node image (every node container is cloned from it)"
        if "gpu-cluster:slurm:SlurmController" in types:
            return "the Slurm controller"
        if "gpu-cluster:lxc:CudaContainer" in types and "gpu-cluster:app:WebApp" not in types:
            return "a node container"
        if types and types[-1] == "aws:ec2/instance:Instance":
            return "a host instance"
        return None


@dataclass
class Summary:
    stack: str
    counts: dict[OpType, int] = field(default_factory=dict)
    changes: list[Change] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    host_parts: set[str] = field(default_factory=set)
    """The names of the stack's host parts the events name: with several, rows group by host."""

    @property
    def has_changes(self) -> bool:
        return any(self.counts.get(op, 0) for op in COUNTED)

    @property
    def banner_changes(self) -> list[tuple[Change, str]]:
        return [(c, what) for c in self.changes if (what := c.kills_jobs())]

    def labels(self) -> list[str]:
        labels = []
        if self.counts.get(OpType.REPLACE):
            labels.append("replace")
        if self.counts.get(OpType.DELETE):
            labels.append("delete")
        if not self.has_changes and not self.errors:
            labels.append("no-changes")
        return labels

    def headline(self) -> str:
        parts = [f"{self.counts.get(op, 0)} to {op.value}" for op in COUNTED]
        return f"`{self.stack}`: " + ", ".join(parts)


def summarize(stack: str, events: Iterable[EngineEvent]) -> Summary:
    """Counts from the engine's SummaryEvent (or its steps, if the run ended early); one Change per step."""
    summary = Summary(stack)
    steps: dict[str, tuple[OpType, tuple[str, ...]]] = {}
    parents: dict[str, str] = {}
    engine_counts = None
    for event in events:
        if event.resource_pre_event:
            meta = event.resource_pre_event.metadata
            state = meta.new or meta.old
            if state and state.parent:
                parents[meta.urn] = state.parent
            summary.host_parts |= {
                u.rsplit("::", 1)[-1] for u in (meta.urn, state.parent if state else "") if u and _is_host_part(u)
            }
            op = OpType(meta.op)
            if op not in HIDDEN:
                # Sorted: the engine lists a step's changed keys in no fixed order.
                steps[meta.urn] = (op, tuple(sorted(meta.keys or meta.diffs or ())))
        elif event.summary_event:
            engine_counts = {OpType(op): n for op, n in event.summary_event.resource_changes.items()}
        elif event.diagnostic_event and event.diagnostic_event.severity == "error":
            summary.errors.append(event.diagnostic_event.message.strip())
    for urn, (op, keys) in steps.items():
        ancestors = [urn]
        while ancestors[-1] in parents and len(ancestors) < 64:
            ancestors.append(parents[ancestors[-1]])
        summary.changes.append(Change(op, urn, keys, tuple(ancestors[1:])))
    summary.changes.sort(key=lambda c: (c.op.value, c.name))
    if engine_counts is None:
        engine_counts = {}
        for change in summary.changes:
            engine_counts[change.op] = engine_counts.get(change.op, 0) + 1
    summary.counts = {op: engine_counts.get(op, 0) for op in COUNTED}
    return summary


class Collector:
    """An `on_event` callback for `stack.preview`: keeps the events for `summarize`."""

    def __init__(self):
        self.events: list[EngineEvent] = []

    def __call__(self, event: EngineEvent) -> None:
        self.events.append(event)


def read_event_log(path: Path) -> list[EngineEvent]:
    """Engine events from a JSON-lines event log (`pulumi preview --event-log`)."""
    return [EngineEvent.from_json(json.loads(line)) for line in path.read_text().splitlines() if line.strip()]


def _details(title: str, body: str, lang: str = "") -> str:
    return f"<details><summary>{title}</summary>\n\n```{lang}\n{body.rstrip()}\n```\n\n</details>\n"


def _table(changes: list[Change]) -> list[str]:
    rows = [f"| {c.op.value} | `{c.name}` | {', '.join(c.keys)} |" for c in changes]
    return ["| op | resource | changed keys |\n|---|---|---|", *rows, ""]


def _tables(summary: Summary) -> list[str]:
    """One table; with several host parts, one per host part (what the change does to each
    host), then one of the rest of the cluster (Slurm, services, boot units)."""
    if len(summary.host_parts) < 2:
        return _table(summary.changes)
    out = []
    for part in sorted({c.host_part for c in summary.changes if c.host_part}):
        out += [f"#### Host part `{part}`\n", *_table([c for c in summary.changes if c.host_part == part])]
    rest = [c for c in summary.changes if not c.host_part]
    if rest:
        out += ["#### The whole cluster\n", *_table(rest)]
    return out


def comment(summary: Summary | None, stack: str, preview: str = "", diff: str | None = None) -> str:
    """The Markdown comment for one stack, scrubbed and cut to GitHub's limit."""
    out = [MARKER.format(stack=stack)]
    if summary is None:
        out.append(f"### `{stack}`: offline render only (no state or credentials in this run)\n")
    else:
        out.append(f"### {summary.headline()}\n")
        if summary.banner_changes:
            out.append("> [!CAUTION]\n> **Running jobs die:** this change replaces or deletes")
            out.extend(f"> - {what}: `{c.name}` ({c.op.value})" for c, what in summary.banner_changes)
            out.append("")
        if summary.errors:
            out.append("> [!WARNING]\n> The preview failed:\n" + "\n".join(f"> {e}" for e in summary.errors) + "\n")
        if summary.changes:
            out.extend(_tables(summary))
        elif not summary.errors:
            out.append("No changes.\n")
    if summary is not None or diff is not None:
        labels = summary.labels() if summary else []
        if labels:
            out.append("Labels: " + ", ".join(f"`{label}`" for label in labels) + "\n")
    if diff is not None:
        out.append(_details("Generated files (offline render, base → head)", diff or "(no changes)", "diff"))
    if preview:
        out.append(_details("pulumi preview --diff", preview))
    text = scrub("\n".join(out))
    if len(text) > LIMIT:
        text = text[: LIMIT - 200] + "\n```\n\n</details>\n\n(cut: the full text is in the workflow's artifact)\n"
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m review.summary", description=__doc__.split("\n\n")[0])
    parser.add_argument("stack")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--events", type=Path, help="JSON-lines engine event log of the preview")
    parser.add_argument("--preview", type=Path, help="text output of `pulumi preview --diff`")
    parser.add_argument("--diff", type=Path, help="output of `python -m review.diff`")
    args = parser.parse_args(argv)
    summary = summarize(args.stack, read_event_log(args.events)) if args.events else None
    preview = args.preview.read_text() if args.preview and args.preview.exists() else ""
    diff = args.diff.read_text() if args.diff else None
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "comment.md").write_text(comment(summary, args.stack, preview, diff))
    (args.out / "labels").write_text("".join(f"{label}\n" for label in (summary.labels() if summary else [])))
    return 0


if __name__ == "__main__":
    from review.cli import run

    sys.exit(run(main))
