"""The offline render (review/render.py) and its diff (review/diff.py)."""

import difflib
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from review.diff import diff_dirs, diff_refs, render_tree
from review.program import ROOT, run_program
from review.render import render_run
from tests.harness.program_harness import fixture_file

STACKS = sorted(p.name.removeprefix("Pulumi.").removesuffix(".yaml") for p in (ROOT / "stacks").glob("Pulumi.*.yaml"))
NEW_NODE = "      - {name: c004, nat_address: 10.42.3.6, cluster_address: 10.42.5.5, gpus: 0}\n"


def _render_cli(stack: str, outdir: Path) -> dict[str, bytes]:
    subprocess.run([sys.executable, "-m", "review.render", stack, str(outdir)], cwd=ROOT, check=True)
    return {str(p.relative_to(outdir)): p.read_bytes() for p in sorted(outdir.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("stack", STACKS)
def test_render_is_deterministic_byte_for_byte(stack, tmp_path):
    first = _render_cli(stack, tmp_path / "one")
    second = _render_cli(stack, tmp_path / "two")
    assert first == second
    assert "resources.yaml" in first
    # No false positives of the key scrubber on the real stacks.
    assert [path for path, text in first.items() if b"[scrubbed" in text] == []


def test_render_writes_the_generated_files_by_name(tmp_path):
    files = _render_cli("local", tmp_path / "out")
    for path in [
        "files/gpu-slurm-slurmctld/slurm.conf",
        "files/gpu-slurm-slurmctld/gres.conf",
        "files/gpu-c000-lxc/config",
        "files/gpu-web-service/app.py",
        "files/gpu-boot-unit/unit.service",
        "scripts/lib/core.sh",
        "scripts/lib/lxc.sh",
        "scripts/container_create.sh",
    ]:
        assert path in files, path
    assert b"NodeName=c003 NodeAddr=10.42.3.5" in files["files/gpu-slurm-slurmctld/slurm.conf"]
    assert b"lxc.net.0.ipv4.address = 10.42.3.2/24" in files["files/gpu-c000-lxc/config"]
    listing = yaml.safe_load(files["resources.yaml"])
    lxc = listing["gpu-c000-lxc"]
    assert lxc["type"] == "command:local:Command"
    assert lxc["parent"] == "gpu-c000"
    assert "gpu-image-rootfs" in lxc["depends_on"]
    assert lxc["inputs"]["environment"]["LXC_CONFIG"] == "<files/gpu-c000-lxc/config>"
    assert lxc["inputs"]["create"] == (
        "scripts/lib/core.sh + scripts/lib/gpu_driver.sh + scripts/lib/lxc.sh + scripts/lib/lxc_config.sh"
        " + scripts/lib/people.sh + scripts/lib/userns.sh + scripts/container_create.sh"
    )


def test_render_writes_kubernetes_manifests(tmp_path):
    files = _render_cli("k8s", tmp_path / "out")
    deployment = yaml.safe_load(files["manifests/k8s-web-app-deployment.yaml"])
    assert deployment["kind"] == "Deployment"
    assert yaml.safe_load(files["resources.yaml"])["k8s-web-app-deployment"]["inputs"] == (
        "<manifests/k8s-web-app-deployment.yaml>"
    )


def test_render_redacts_secrets_and_scrubs_key_shaped_text(tmp_path):
    program = tmp_path / "program.py"
    program.write_text(
        textwrap.dedent(
            """
            import pulumi
            from pulumi_command import local

            local.Command(
                "with-secrets",
                create="echo",
                environment={"TOKEN": pulumi.Output.secret("hunter2-do-not-print"), "PLAIN": "visible"},
                stdin=pulumi.Output.secret("munge-key-bytes-do-not-print"),
            )
            local.Command(
                "key-shaped",
                create="echo",
                environment={
                    "PEM": "-----BEGIN RSA PRIVATE KEY-----\\nMIIEpAIBAAKCAQEA7\\n-----END RSA PRIVATE KEY-----\\n",
                    "AWS_ID": "AKIAIOSFODNN7EXAMPLE",
                },
            )
            """
        )
    )
    files = render_run(run_program({}, stack="unit", main=program))
    text = "\n".join(files.values())
    assert "hunter2" not in text and "munge-key-bytes" not in text
    listing = yaml.safe_load(files["resources.yaml"])
    # The SDK marks a whole map secret when one value in it is (why secrets travel by stdin).
    assert listing["with-secrets"]["inputs"]["environment"] == "[secret]"
    assert listing["with-secrets"]["inputs"]["stdin"] == "[secret]"
    assert "MIIEpAIBAAKCAQEA7" not in text and "AKIAIOSFODNN7EXAMPLE" not in text
    assert "[scrubbed: PEM block]" in files["files/key-shaped/PEM"]
    assert listing["key-shaped"]["inputs"]["environment"]["AWS_ID"] == "[scrubbed: AWS access key]"


# A node's Enroot files long enough to be files of their own (components/containers).
CONTAINER_FILES = ("DRIVER_HOOK", "ENROOT_CONF", "MOUNTS", "PROLOG", "RUNTIME_PACKAGES")


def _tree(tmp_path: Path, name: str) -> Path:
    tree = tmp_path / name
    tree.mkdir()
    for part in ("components", "stacks"):
        shutil.copytree(ROOT / part, tree / part, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "__main__.py", tree)
    # The test's copy of the local stack: the exact lines asserted below are its.
    shutil.copy(fixture_file("local"), tree / "stacks" / "Pulumi.local.yaml")
    return tree


def test_adding_a_node_changes_only_that_nodes_lines(tmp_path):
    base, head = _tree(tmp_path, "base"), _tree(tmp_path, "head")
    stack_file = head / "stacks" / "Pulumi.local.yaml"
    lines = stack_file.read_text().splitlines(keepends=True)
    last_node = max(i for i, line in enumerate(lines) if line.lstrip().startswith("- {name: c003"))
    stack_file.write_text("".join([*lines[: last_node + 1], NEW_NODE, *lines[last_node + 1 :]]))
    render_tree("local", base, tmp_path / "base-render")
    render_tree("local", head, tmp_path / "head-render")
    diff = diff_dirs(tmp_path / "base-render", tmp_path / "head-render")

    per_file: dict[str, list[str]] = {}
    current = ""
    for line in diff.splitlines():
        if line.startswith("+++ "):
            current = line.split(" ", 1)[1].removeprefix("b/")
            per_file[current] = []
        elif line[:1] in "+-" and not line.startswith("--- "):
            per_file[current].append(line)
    new_files = sorted(path for path in per_file if path.startswith("files/gpu-c004-"))
    # gpu.driver_files is empty (the driver is found on the host): no file of its own.
    # (Its slurmd installs the job files' reaper, a script long enough to be a file; its Enroot
    # files are those of every node, jobs in container images being on by default.)
    assert new_files == [
        "files/gpu-c004-lxc/DEVICES",
        "files/gpu-c004-lxc/config",
        *(f"files/gpu-c004-slurm-containers/{name}" for name in CONTAINER_FILES),
        "files/gpu-c004-slurm-slurmd/JOB_FILES_REAPER",
    ]
    assert "+lxc.net.0.ipv4.address = 10.42.3.6/24" in per_file["files/gpu-c004-lxc/config"]
    partition = "PartitionName=tutorial Nodes=c[{}] Default=YES MaxTime=INFINITE OverSubscribe=YES State=UP"
    for conf in ("files/gpu-slurm-client/slurm.conf", "files/gpu-slurm-slurmctld/slurm.conf"):
        assert per_file[conf] == [
            "+NodeName=c004 NodeAddr=10.42.3.6 CPUs=1 RealMemory=672 State=UNKNOWN",
            "-" + partition.format("000-003"),
            "+" + partition.format("000-004"),
        ]
    # A node without GPUs (the local stack's GPU is c000's): no gres.conf line.
    assert "files/gpu-slurm-slurmctld/gres.conf" not in per_file

    # Every other changed line is a line naming c004, or an existing line whose only change is
    # the new node (in a list of containers, a node range, a node count).
    def without_new_node(line: str) -> str:
        line = re.sub(r"(\\n| |,)gpu-c004", "", line).replace("c[000-004]", "c[000-003]")
        return any_node_memory(line.replace("'5'", "'4'"))

    def any_node_memory(line: str) -> str:
        """The memory and the kernel limits the host must have for its nodes grow by the new
        node's, and the script store's set of files by the new node's LXC config."""
        line = re.sub(r"(SET: )[0-9a-f]{64}", r"\1H", line)
        return re.sub(r"(NODE_MEMORY_MB\W+|fs\.inotify\.max_user_\w+ )\d+", r"\1N", line)

    def only_the_new_node(path: str, lines: list[str]) -> None:
        added = {line[1:]: without_new_node(line[1:]) for line in lines if line.startswith("+")}
        for removed in (line[1:] for line in lines if line.startswith("-")):
            match = [line for line, normal in added.items() if normal == any_node_memory(removed)]
            assert match, f"{path}: {removed!r} changed by more than the new node"
            del added[match[0]]
        assert all("c004" in line for line in added), (path, list(added))

    for path, lines in per_file.items():
        if path not in new_files and path != "resources.yaml":
            only_the_new_node(path, lines)

    old = yaml.safe_load((tmp_path / "base-render" / "resources.yaml").read_text())
    new = yaml.safe_load((tmp_path / "head-render" / "resources.yaml").read_text())
    assert sorted(set(new) - set(old)) == [
        *("gpu-c004", "gpu-c004-lxc", "gpu-c004-slurm", "gpu-c004-slurm-containers", "gpu-c004-slurm-slurmd")
    ]
    assert set(old) <= set(new)
    for name in old:
        before, after = (yaml.safe_dump(entry, width=100_000).splitlines() for entry in (old[name], new[name]))
        lines = [line for line in difflib.ndiff(before, after) if line[:2] in ("- ", "+ ")]
        only_the_new_node(f"resources.yaml: {name}", [line[0] + line[2:] for line in lines])
    # The node's own commands get what every node gets, with its own name and addresses.
    assert new["gpu-c004-lxc"]["inputs"]["environment"]["NAT_ADDRESS"] == "10.42.3.6"
    assert new["gpu-c004-slurm-slurmd"]["inputs"]["environment"]["NODE"] == "c004"


def test_diff_of_a_commit_with_itself_is_empty():
    assert diff_refs("local", "HEAD", "HEAD") == ""


def test_a_stack_missing_at_the_base_renders_as_all_new(tmp_path):
    base = _tree(tmp_path, "base")
    (base / "stacks" / "Pulumi.local.yaml").unlink()
    render_tree("local", base, tmp_path / "base-render")
    render_tree("local", ROOT, tmp_path / "head-render")
    diff = diff_dirs(tmp_path / "base-render", tmp_path / "head-render")
    assert "--- /dev/null\n+++ b/resources.yaml\n" in diff
    assert not [line for line in diff.splitlines() if line.startswith("-") and not line.startswith("---")]


def test_a_stack_that_does_not_validate_fails_the_render_with_the_field_named(tmp_path):
    tree = _tree(tmp_path, "broken")
    stack_file = tree / "stacks" / "Pulumi.local.yaml"
    stack_file.write_text(stack_file.read_text().replace("port: 8080", "port: 80800"))
    with pytest.raises(SystemExit, match=r"cluster\.web_app\.port: Input should be less than or equal to 65535"):
        render_tree("local", tree, tmp_path / "out")
