"""Record the resource graph of a released commit of this repository, one JSON file per stack.

Run: `venv/bin/python tests/upgrade/snapshot.py COMMIT` (from the repository root). The
commit's files are extracted with `git archive` into a temporary directory and its
__main__.py runs there under this repository's mocks (review/program.py),
once per stack of that commit's stacks/, in a fresh interpreter whose imports resolve to
the commit's components. Writes tests/upgrade/snapshots/<stack>.json, which
tests/upgrade/test_upgrade.py compares the current program against.

`release_run(commit, stack)` gives the same run whole (every registration, dependencies
included), so its commands can run for real (tests/harness/command_executor.py): the
end-to-end upgrade test brings a cluster up with the release's program.
`release_stack_config(commit, stack)` is that commit's stack file, for the current program to
run on: an upgrade of the program alone, the stack file left as it was.
"""

import contextlib
import dataclasses
import importlib.util
import json
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
HARNESS = ROOT / "tests" / "harness"
PROGRAM = ROOT / "review" / "program.py"
SNAPSHOTS = HERE / "snapshots"


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def record(tree: Path, stack: str) -> list[dict]:
    """The graph of the program in `tree` for one stack (call in a fresh interpreter)."""
    sys.path.insert(0, str(tree))
    harness = _load("snapshot_program", PROGRAM)
    plan = _load("snapshot_plan", HARNESS / "plan.py")
    harness.ROOT = tree
    return plan.records(harness.run_program(harness.stack_config(stack), stack))


def registrations(tree: Path, stack: str) -> list[dict]:
    """Every registration of the program in `tree` for one stack, as JSON (a fresh interpreter)."""
    sys.path.insert(0, str(tree))
    harness = _load("snapshot_program", PROGRAM)
    harness.ROOT = tree
    run = harness.run_program(harness.stack_config(stack), stack)
    return [
        {key: sorted(value) if isinstance(value, frozenset) else value for key, value in dataclasses.asdict(r).items()}
        for r in run.resources
    ]


@contextlib.contextmanager
def extracted(commit: str):
    """The files of `commit` in a temporary directory; yields (full commit, directory)."""
    full = subprocess.run(["git", "rev-parse", commit], cwd=ROOT, capture_output=True, text=True, check=True)
    commit = full.stdout.strip()
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp)
        archive = subprocess.run(["git", "archive", commit], cwd=ROOT, capture_output=True, check=True).stdout
        archive_path = tree.parent / f"{tree.name}.tar"
        archive_path.write_bytes(archive)
        # By its path: run as a script, the repository root is not on sys.path.
        _load("snapshot_tarball", ROOT / "review" / "tarball.py").extract(archive_path, tree)
        archive_path.unlink()
        yield commit, tree


def _in_tree(tree: Path, mode: str, stack: str) -> list[dict]:
    done = subprocess.run(
        [sys.executable, __file__, mode, str(tree), stack], cwd=tree, capture_output=True, text=True, check=True
    )
    return json.loads(done.stdout)


def release_run(commit: str, stack: str, edit=None):
    """The ProgramRun of `commit`'s program for `stack` (its own stack file, or that file's
    text as `edit` returns it)."""
    from review.program import ProgramRun, Registration

    fields = {f.name: f.type for f in dataclasses.fields(Registration)}
    with extracted(commit) as (_, tree):
        if edit:
            stack_file = tree / "stacks" / f"Pulumi.{stack}.yaml"
            stack_file.write_text(edit(stack_file.read_text()))
        found = _in_tree(tree, "--registrations", stack)
    resources = []
    for entry in found:
        for key, value in entry.items():
            if "frozenset" in str(fields[key]):
                entry[key] = frozenset(value)
            elif "tuple" in str(fields[key]):
                entry[key] = tuple(value)
        resources.append(Registration(**entry))
    return ProgramRun(resources=resources, stack=stack, config=release_stack_config(commit, stack, edit))


def release_stack_config(commit: str, stack: str, edit=None) -> dict:
    """The `gpu-cluster:*` config of `commit`'s stacks/Pulumi.<stack>.yaml (edited by `edit`)."""
    from review.program import stack_config

    shown = subprocess.run(
        ["git", "show", f"{commit}:stacks/Pulumi.{stack}.yaml"], cwd=ROOT, capture_output=True, text=True, check=True
    )
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / f"Pulumi.{stack}.yaml").write_text(edit(shown.stdout) if edit else shown.stdout)
        return stack_config(stack, Path(tmp))


def snapshot(commit: str) -> None:
    SNAPSHOTS.mkdir(exist_ok=True)
    with extracted(commit) as (commit, tree):
        for stack_file in sorted((tree / "stacks").glob("Pulumi.*.yaml")):
            stack = stack_file.name.removeprefix("Pulumi.").removesuffix(".yaml")
            resources = _in_tree(tree, "--record", stack)
            document = {"commit": commit, "stack": stack, "resources": resources}
            out = SNAPSHOTS / f"{stack}.json"
            out.write_text(json.dumps(document, indent=1, sort_keys=True) + "\n")
            print(f"{out.relative_to(ROOT)}: {len(resources)} resources of {commit[:7]}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--record"]:
        print(json.dumps(record(Path(sys.argv[2]), sys.argv[3])))
    elif sys.argv[1:2] == ["--registrations"]:
        print(json.dumps(registrations(Path(sys.argv[2]), sys.argv[3])))
    elif len(sys.argv) == 2:
        snapshot(sys.argv[1])
    else:
        sys.exit(__doc__)
