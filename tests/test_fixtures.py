"""The example stacks a site may edit (stacks/Pulumi.local.yaml and the others, as the README
invites) are not test fixtures: tests that assert exact values read their own copies in
tests/fixtures/stacks/. Proved by editing a copy of the project's local stack (one node more,
another port) and running the tests that once failed on such an edit."""

import os
import re
import shutil
import subprocess
import sys

from components.lxc.node_image import third_party
from tests.harness.program_harness import FIXTURES, ROOT

EXAMPLES = sorted(p.name for p in FIXTURES.glob("Pulumi.*.yaml"))
# Tests that read the shipped files on purpose, asserting nothing of their values: every
# stack validates and runs, the workflow lists every stack, the wrappers run a README stack,
# a released stack still exists; the harness reads the e2e stack (the tests' own) there.
READ_SHIPPED = {
    "test_stacks.py",
    "test_stack_files.py",
    "test_workflows.py",
    "test_pulumi_wrappers.py",
    "test_upgrade.py",
    "snapshot.py",  # the release's stack files, from git
    "program_harness.py",
}
SHIPPED_READ = re.compile(r'ROOT\s*/\s*"stacks"\s*/\s*f?"Pulumi\.|from review\.program import[^\n]*stack_config')


def test_every_example_stack_has_a_fixture_copy():
    shipped = {p.name for p in (ROOT / "stacks").glob("Pulumi.*.yaml")} - {"Pulumi.e2e.yaml"}
    assert set(EXAMPLES) == shipped


def test_no_test_reads_a_shipped_example_stack_for_its_values():
    offenders = [
        str(path.relative_to(ROOT))
        for path in (ROOT / "tests").rglob("*.py")
        if path.name not in READ_SHIPPED and SHIPPED_READ.search(path.read_text())
    ]
    assert offenders == []


NEW_NODE = "      - {name: c004, nat_address: 10.42.3.6, cluster_address: 10.42.5.5, gpus: 0}\n"


def test_a_site_that_edits_its_local_stack_breaks_no_test(tmp_path):
    tree = tmp_path / "project"
    tree.mkdir()
    for part in ("components", "review", "tests", "stacks"):
        shutil.copytree(ROOT / part, tree / part, ignore=shutil.ignore_patterns("__pycache__", "fixtures"))
    shutil.copytree(FIXTURES, tree / "tests" / "fixtures" / "stacks")
    for name in ("__main__.py", "Pulumi.yaml", "pyproject.toml"):
        shutil.copy(ROOT / name, tree)
    local = tree / "stacks" / "Pulumi.local.yaml"
    text = local.read_text().replace("host_port: 7000", "host_port: 7002")
    at = text.index("\n", text.index("- {name: c003")) + 1
    local.write_text(text[:at] + NEW_NODE + text[at:])
    tests = [
        "tests/test_config.py::test_stack_files_validate",
        "tests/test_config.py::test_hostlist_groups_mixed_names",
        "tests/test_config.py::test_cross_field_rule_message",
        "tests/review/test_render.py::test_adding_a_node_changes_only_that_nodes_lines",
        "tests/upgrade/test_upgrade.py::test_upgrade_replaces_and_deletes_nothing",
        "tests/review/test_stack_files.py",
        "tests/test_stacks.py",
    ]
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "not e2e", *tests],
        cwd=tree,
        # Where a site's checkout finds Enroot's and Pyxis' sources (the copy has none beside it).
        env={**os.environ, "PULUMI_PLUGIN_SOURCES": str(third_party())},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:]
    assert " passed" in done.stdout and "failed" not in done.stdout
