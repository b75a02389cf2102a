"""The reviewer's summary from engine events, built with the SDK's own event types."""

import json

import pytest
from pulumi.automation import PreviewResult
from pulumi.automation.events import (
    DiagnosticEvent,
    EngineEvent,
    OpType,
    ResourcePreEvent,
    StepEventMetadata,
    StepEventStateMetadata,
    SummaryEvent,
)

from review.preview import CliUnavailableError, cli_environment, run_preview
from review.summary import MARKER, Collector, comment, read_event_log, summarize
from tests.harness.program_harness import run_program, stack_config

PARENTS: dict[str, str] = {}


@pytest.fixture(scope="module")
def urns() -> dict[str, str]:
    """Real URNs and parents of the local stack (what a resource lives in decides the banner)."""
    resources = run_program(stack_config("local"), stack="local").resources
    PARENTS.update({r.urn: r.parent for r in resources})
    return {r.name: r.urn for r in resources}


def _step(sequence: int, op: OpType, urn: str, keys=None) -> EngineEvent:
    type_ = urn.split("::")[2].split("$")[-1]
    state = StepEventStateMetadata(type=type_, urn=urn, id="", parent=PARENTS.get(urn, ""), provider="")
    meta = StepEventMetadata(
        op=op,
        urn=urn,
        type=type_,
        provider="",
        old=None if op == OpType.CREATE else state,
        new=None if op == OpType.DELETE else state,
        keys=keys,
    )
    return EngineEvent(sequence=sequence, timestamp=0, resource_pre_event=ResourcePreEvent(metadata=meta))


def _summary(sequence: int, **changes: int) -> EngineEvent:
    counts = {OpType(op.replace("_", "-")): n for op, n in changes.items()}
    event = SummaryEvent(maybe_corrupt=False, duration_seconds=1, resource_changes=counts, policy_packs={})
    return EngineEvent(sequence=sequence, timestamp=0, summary_event=event)


def _replace(sequence: int, urn: str, keys) -> list[EngineEvent]:
    """The three steps the engine emits for a delete-before-replace replacement."""
    return [
        _step(sequence, OpType.DELETE_REPLACED, urn),
        _step(sequence + 1, OpType.REPLACE, urn, keys),
        _step(sequence + 2, OpType.CREATE_REPLACEMENT, urn, keys),
    ]


def test_counts_and_a_banner_when_a_node_container_is_replaced(urns):
    events = [
        _step(1, OpType.SAME, urns["gpu-bridges-nat"]),
        *_replace(2, urns["gpu-c001-lxc"], ["triggers"]),
        _step(5, OpType.UPDATE, urns["gpu-slurm-slurmctld"], ["environment"]),
        _step(6, OpType.UPDATE, urns["gpu-slurm-client"], ["environment"]),
        _step(7, OpType.CREATE, urns["gpu-fwd-7000-rules"]),
        _summary(8, same=30, replace=1, update=2, create=1),
    ]
    summary = summarize("local", events)
    assert {op.value: n for op, n in summary.counts.items()} == {"create": 1, "update": 2, "replace": 1, "delete": 0}
    assert summary.headline() == "`local`: 1 to create, 2 to update, 1 to replace, 0 to delete"
    assert [(c.name, what) for c, what in summary.banner_changes] == [("gpu-c001-lxc", "a node container")]
    assert summary.labels() == ["replace"]
    text = comment(summary, "local")
    assert text.startswith(MARKER.format(stack="local"))
    assert "[!CAUTION]" in text and "a node container: `gpu-c001-lxc` (replace)" in text
    assert "| replace | `gpu-c001-lxc` | triggers |" in text
    assert "#### Host part" not in text, "a one-host stack's comment has one table"


def test_the_controller_and_the_node_image_raise_the_banner_the_web_app_does_not(urns):
    # Parents come from the engine's step events; every resource has one (same ops included).
    events = [_step(0, OpType.SAME, urns[name]) for name in ("gpu-web", "gpu-web-container")]
    events += [
        _step(1, OpType.DELETE, urns["gpu-slurm-slurmctld"]),
        *_replace(2, urns["gpu-image-rootfs"], ["triggers"]),
        *_replace(5, urns["gpu-web-container-lxc"], ["triggers"]),
        _step(8, OpType.UPDATE, urns["gpu-c000-lxc"], ["environment"]),  # an update keeps jobs
        _summary(9, delete=1, replace=2, update=1),
    ]
    summary = summarize("local", events)
    assert sorted((c.name, what) for c, what in summary.banner_changes) == [
        ("gpu-image-rootfs", "the node image (every node container is cloned from it)"),
        ("gpu-slurm-slurmctld", "the Slurm controller"),
    ]
    assert summary.labels() == ["replace", "delete"]


def test_a_multi_host_comment_groups_its_rows_by_host_part():
    # The two-host stack: what the change does to each host, then to the rest of the cluster.
    secrets = {"gpu2SshKey": "-----BEGIN OPENSSH PRIVATE KEY-----\nnot-a-key\n-----END OPENSSH PRIVATE KEY-----\n"}
    resources = run_program(stack_config("twohost"), stack="twohost", secrets=secrets).resources
    PARENTS.update({r.urn: r.parent for r in resources})
    duo = {r.name: r.urn for r in resources}
    changed = {"duo-gpu1-host-packages", "duo-c003-lxc", "duo-c002", "duo-slurm-slurmctld", "duo-gpu2-boot-unit"}
    events = [
        _step(i, OpType.SAME, urn)
        for i, urn in enumerate(sorted(duo.values()))
        if urn.rsplit("::", 1)[1] not in changed
    ]
    events += [
        _step(100, OpType.UPDATE, duo["duo-gpu1-host-packages"], ["environment"]),
        *_replace(101, duo["duo-c003-lxc"], ["triggers"]),
        _step(104, OpType.UPDATE, duo["duo-slurm-slurmctld"], ["environment"]),
        _step(105, OpType.UPDATE, duo["duo-gpu2-boot-unit"], ["environment"]),
        _summary(106, update=3, replace=1),
    ]
    summary = summarize("twohost", events)
    assert summary.host_parts == {"duo-gpu1", "duo-gpu2"}
    assert {c.name: c.host_part for c in summary.changes} == {
        "duo-gpu1-host-packages": "duo-gpu1",
        "duo-c003-lxc": "duo-gpu2",
        "duo-slurm-slurmctld": None,
        "duo-gpu2-boot-unit": None,
    }
    text = comment(summary, "twohost")
    table = text[text.index("#### ") : text.index("Labels:")]  # below the banner
    gpu1, gpu2, rest = (
        table.index(f"#### {title}") for title in ("Host part `duo-gpu1`", "Host part `duo-gpu2`", "The whole cluster")
    )
    assert gpu1 < table.index("`duo-gpu1-host-packages`") < gpu2 < table.index("`duo-c003-lxc`") < rest
    assert rest < table.index("`duo-slurm-slurmctld`") and rest < table.index("`duo-gpu2-boot-unit`")
    assert table.count("| op | resource | changed keys |") == 3


def test_no_changes_gets_its_label_and_no_banner(urns):
    events = [_step(i, OpType.SAME, urn) for i, urn in enumerate(sorted(urns.values()))]
    events.append(_summary(len(events), same=len(urns)))
    summary = summarize("local", events)
    assert summary.labels() == ["no-changes"]
    assert not summary.banner_changes and not summary.changes
    text = comment(summary, "local")
    assert "No changes." in text and "CAUTION" not in text


def test_counts_fall_back_to_the_steps_when_the_run_ended_early(urns):
    events = [_step(1, OpType.CREATE, urns["gpu-c000-lxc"]), *_replace(2, urns["gpu-c001-lxc"], ["triggers"])]
    counts = summarize("local", events).counts
    assert counts[OpType.CREATE] == 1 and counts[OpType.REPLACE] == 1


def test_everything_posted_is_scrubbed(urns):
    pem = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmU=\n-----END OPENSSH PRIVATE KEY-----"
    munge_key = "pV7cQ2lYk3ZrT9bW1xN4mA8sD6fG0hJ5kL2zX7cV9bN3mQ1wE4rT6yU8iO0pA2sD"
    error = DiagnosticEvent(message=f"failed: AKIAIOSFODNN7EXAMPLE {pem}", color="never", severity="error")
    events = [EngineEvent(sequence=1, timestamp=0, diagnostic_event=error), _summary(2)]
    summary = summarize("local", events)
    preview = f"+ environment: MUNGE_KEY={munge_key}\n  token ghp_{'a1B2' * 9}\n  pulumi pul-{'0a' * 20}\n"
    diff = f"+AWS_SECRET_ACCESS_KEY = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\n+{munge_key}\n"
    text = comment(summary, "local", preview, diff)
    for leak in (
        "AKIAIOSFODNN7EXAMPLE",
        "b3BlbnNzaC1rZXktdjEAAAAABG5vbmU",
        munge_key,
        "wJalrXUtnFEMI",
        "ghp_",
        "pul-0a",
    ):
        assert leak not in text, leak
    assert "[scrubbed: PEM block]" in text and "[scrubbed: AWS access key]" in text
    assert "AWS_SECRET_ACCESS_KEY = [scrubbed: secret value]" in text
    assert summary.errors and "no-changes" not in summary.labels()


def test_an_event_log_parses_into_the_same_summary(tmp_path, urns):
    """The engine's JSON event log (what the Automation API reads) through the SDK's parser."""
    urn = urns["gpu-c001-lxc"]
    new = {"type": "command:local:Command", "urn": urn, "id": "gpu-c001-lxc", "parent": PARENTS[urn], "provider": ""}
    lines = [
        {"sequence": 1, "timestamp": 0, "resourcePreEvent": {"metadata": {"op": "replace", "urn": urn,
         "type": "command:local:Command", "provider": "", "old": new, "new": new, "keys": ["triggers"]}}},
        {"sequence": 2, "timestamp": 0, "summaryEvent": {"maybeCorrupt": False, "durationSeconds": 1,
         "resourceChanges": {"replace": 1, "same": 30}, "PolicyPacks": {}}},
    ]  # fmt: skip
    log = tmp_path / "events.jsonl"
    log.write_text("".join(json.dumps(line) + "\n" for line in lines))
    summary = summarize("local", read_event_log(log))
    assert summary.counts[OpType.REPLACE] == 1 and summary.labels() == ["replace"]
    assert [c.name for c, _ in summary.banner_changes] == ["gpu-c001-lxc"]


def test_the_collector_is_an_on_event_callback(urns):
    collector = Collector()
    for event in [_step(1, OpType.CREATE, urns["gpu-c000-lxc"]), _summary(2, create=1)]:
        collector(event)
    assert summarize("local", collector.events).counts[OpType.CREATE] == 1


def test_a_long_comment_is_cut_below_githubs_limit(urns):
    text = comment(summarize("local", [_summary(1)]), "local", diff="+x\n" * 40_000)
    assert len(text) <= 64_000 and text.rstrip().endswith("artifact)")


class _FakeStack:
    """Stands in for `auto.Stack` (no CLI here): delivers SDK events to `on_event` as the engine would."""

    def __init__(self, events, stdout):
        self.events, self.stdout, self.calls = events, stdout, []

    def preview(self, **kwargs):
        self.calls.append(kwargs)
        for event in self.events:
            kwargs["on_event"](event)
        summary = next(e.summary_event for e in self.events if e.summary_event)
        return PreviewResult(self.stdout, "", summary.resource_changes)


def test_the_preview_driver_asks_for_the_diff_and_summarizes_its_events(urns):
    stack = _FakeStack([*_replace(1, urns["gpu-c000-lxc"], ["triggers"]), _summary(4, replace=1)], "  ~ diff text")
    summary, text = run_preview("local", "acme/local", select=lambda **kw: stack)
    assert stack.calls[0]["diff"] is True and stack.calls[0]["color"] == "never"
    assert text == "  ~ diff text"
    assert summary.labels() == ["replace"] and not summary.errors
    assert [c.name for c, _ in summary.banner_changes] == ["gpu-c000-lxc"]


def test_a_preview_that_cannot_run_is_an_error_not_no_changes():
    def missing_cli(**kwargs):
        raise FileNotFoundError("pulumi")

    summary, text = run_preview("local", "local", select=missing_cli)
    assert "not installed" in text
    assert summary.errors and summary.labels() == []
    assert "[!WARNING]" in comment(summary, "local", text)


def test_without_the_pinned_cli_the_preview_says_what_tools_pulumi_cli_sh_said(tmp_path):
    """The CLI comes from `tools/pulumi-cli.sh env`, as ./pulumi.sh's does; where it finds or
    installs none, its message is the preview's error."""
    (tmp_path / "tools").mkdir()
    script = tmp_path / "tools" / "pulumi-cli.sh"
    script.write_text("#!/bin/bash\necho 'error: could not download the Pulumi CLI v3' >&2\nexit 1\n")
    script.chmod(0o755)
    with pytest.raises(CliUnavailableError, match="could not download the Pulumi CLI v3"):
        cli_environment(tmp_path, {"PATH": "/usr/bin:/bin"})
    with pytest.raises(CliUnavailableError, match=r"pulumi-cli\.sh is missing"):
        cli_environment(tmp_path / "elsewhere", {"PATH": "/usr/bin:/bin"})

    summary, text = run_preview("local", "local", select=lambda **kw: cli_environment(tmp_path, {}))
    assert text == "no Pulumi CLI of the pinned version: error: could not download the Pulumi CLI v3"
    assert summary.errors and summary.labels() == []
