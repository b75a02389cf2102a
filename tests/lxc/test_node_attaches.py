"""How few commands a node's bring-up runs inside its container: a stopped clone is named in
its overlay before it starts, a new container costs one lxc-attach (the wait for its boot),
and slurmd's setup two (every file at once, then munge and slurmd). Each attach is a process
tree on the host and one in the container; with many nodes at once they add up to CPU."""

import os
import subprocess
from pathlib import Path

from components.common.transport import helpers, script
from components.lxc.cuda_container import FILES as LXC_FILES
from components.slurm.node import FILES as SLURM_FILES
from tests.harness.program_harness import run_program, stack_config


def bash(text: str, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["/bin/bash", "-c", text, "test", *args],
        env={"PATH": os.environ["PATH"], **(env or {})},
        capture_output=True,
        text=True,
        check=False,
    )


def overlay_clone(tmp_path: Path) -> tuple[Path, Path, Path]:
    """An LXC path holding a stopped overlay clone `t-c000` of an image's rootfs."""
    lower, container = tmp_path / "image" / "rootfs", tmp_path / "lxc" / "t-c000"
    upper = container / "overlay" / "delta"
    (lower / "etc").mkdir(parents=True)
    (lower / "etc" / "hosts").write_text("127.0.0.1\tlocalhost\n127.0.1.1\tt-image\n")
    (lower / "etc" / "hostname").write_text("t-image\n")
    (upper / "etc").mkdir(parents=True)
    (upper / "etc" / "hostname").write_text("t-c000\n")
    (container / "config").write_text(f"lxc.uts.name = t-c000\nlxc.rootfs.path = overlay:{lower}:{upper}\n")
    (container / "gpucluster-owner").write_text("t\n")
    return lower, upper, container


def test_a_stopped_clone_is_named_in_its_overlay_and_the_image_is_untouched(tmp_path):
    lower, upper, _ = overlay_clone(tmp_path)
    done = bash(f"{helpers()}\nname_stopped_clone t-c000 c000", env={"LXC_PATH": str(tmp_path / "lxc")})
    assert done.returncode == 0, done.stderr
    assert (upper / "etc" / "hostname").read_text() == "c000\n"
    assert (upper / "etc" / "hosts").read_text() == "127.0.0.1\tlocalhost\n127.0.1.1\tc000\n"
    assert oct((upper / "etc" / "hosts").stat().st_mode & 0o777) == "0o644"
    assert (lower / "etc" / "hosts").read_text().endswith("t-image\n"), "the image's layer changed"
    assert (lower / "etc" / "hostname").read_text() == "t-image\n"


def test_a_container_that_is_no_overlay_clone_is_left_to_the_attach(tmp_path):
    container = tmp_path / "lxc" / "t-c000"
    (container / "rootfs" / "etc").mkdir(parents=True)
    (container / "config").write_text(f"lxc.rootfs.path = dir:{container}/rootfs\n")
    done = bash(f"{helpers()}\nname_stopped_clone t-c000 c000", env={"LXC_PATH": str(tmp_path / "lxc")})
    assert done.returncode == 1
    assert list((container / "rootfs" / "etc").iterdir()) == []


# in_ct runs its command here, as if this machine were the container; lxc-attach is counted.
LOCAL_IN_CT = """
in_ct() { shift; echo attach >> "$CALLS"; "$@"; }
"""


def test_staged_files_go_in_with_one_attach_and_only_changes_are_written(tmp_path):
    calls, target = tmp_path / "calls", tmp_path / "ct"
    owner = f"{os.getuid()}:{os.getgid()}"
    install = f"""{helpers()}{LOCAL_IN_CT}
stage=$(mktemp -d)
printf 'key' | ct_stage "$stage" {target}/etc/munge/munge.key 0400 {owner}
printf 'opts\\n' | ct_stage "$stage" {target}/etc/default/slurmd 0644 {owner}
ct_stage_absent "$stage" {target}/usr/local/sbin/gone
ct_install_staged c "$stage"
rm -rf "$stage"
"""
    (target / "usr/local/sbin").mkdir(parents=True)
    (target / "usr/local/sbin/gone").write_text("old")
    first = bash(install, env={"CALLS": str(calls)})
    assert first.returncode == 0, first.stderr
    assert first.stdout.split() == [
        f"{target}/etc/munge/munge.key",
        f"{target}/etc/default/slurmd",
        f"{target}/usr/local/sbin/gone",
    ]
    assert (target / "etc/munge/munge.key").read_text() == "key"
    assert oct((target / "etc/munge/munge.key").stat().st_mode & 0o777) == "0o400"
    assert (target / "etc/default/slurmd").read_text() == "opts\n"
    assert not (target / "usr/local/sbin/gone").exists()
    assert calls.read_text().split() == ["attach"]
    # The same files again: nothing changed, nothing printed.
    again = bash(install, env={"CALLS": str(calls)})
    assert again.returncode == 0, again.stderr
    assert again.stdout == ""
    assert sorted(p.name for p in (target / "etc/munge").iterdir()) == ["munge.key"], "a temporary file was left"


# lxc-* as recorded shell functions: the container runs once lxc-start was called, its boot
# answers, and sinfo reports the node idle.
FAKES = """
lxc_fake() { printf '%s\\n' "$*" >> "$CALLS"; }
for c in lxc-stop lxc-start lxc-cgroup lxc-copy lxc-destroy; do eval "$c() { lxc_fake $c \\"\\$@\\"; }"; done
lxc-info() { grep -q '^lxc-start' "$CALLS" && echo RUNNING || echo STOPPED; }
lxc-attach() {
  lxc_fake lxc-attach "$@"
  cat > /dev/null
  case "$*" in
    *is-system-running*) printf 'running\\n 10.43.3.2/24\\nc000\\n' ;;
    *'systemctl restart slurmd'*) printf 'munge restarted\\nslurmd restarted\\n' ;;
    *tar*) printf '/etc/munge/munge.key\\n/etc/default/slurmd\\n' ;;
  esac
}
ip() { :; }
sinfo() { echo idle; }
"""


def e2e_inputs(name: str) -> dict:
    (resource,) = [r for r in run_program(stack_config("e2e"), stack="e2e").resources if r.name == name]
    return resource.inputs["environment"]


def run_with_fakes(path: Path, environment: dict) -> subprocess.CompletedProcess:
    header = f"# ---- {path.name} ----"
    text = script(path).replace(header, FAKES + header)
    return bash(text, env=environment)


def attaches(calls: Path) -> list[str]:
    return [line for line in calls.read_text().splitlines() if line.startswith("lxc-attach")]


def node_create_environment(tmp_path: Path, calls: Path) -> dict:
    """The e2e stack's node create, for a container t-c000 of cluster t under tmp_path."""
    return {
        **e2e_inputs("e2e-c000-lxc"),
        "CONTAINER": "t-c000",
        "CLUSTER": "t",
        "IMAGE": "t-image",
        "LXC_PATH": str(tmp_path / "lxc"),
        "CLUSTER_DIR": str(tmp_path / "state"),
        "SHARED_DIR": str(tmp_path / "shared"),
        "CALLS": str(calls),
    }


def test_a_new_container_is_named_before_its_start_and_attached_once(tmp_path):
    _, upper, _ = overlay_clone(tmp_path)
    calls = tmp_path / "calls"
    calls.touch()
    environment = node_create_environment(tmp_path, calls)
    done = run_with_fakes(LXC_FILES / "container_create.sh", environment)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "t-c000\n"
    assert (upper / "etc" / "hostname").read_text() == "c000\n"
    assert len(attaches(calls)) == 1, attaches(calls)


def test_slurmd_is_set_up_with_two_attaches(tmp_path):
    calls, state = tmp_path / "calls", tmp_path / "state"
    calls.touch()
    (tmp_path / "lxc" / "e2e-c001").mkdir(parents=True)
    key = tmp_path / "munge.key"
    key.write_bytes(os.urandom(64))
    environment = {
        **e2e_inputs("e2e-c001-slurm-slurmd"),
        "LXC_PATH": str(tmp_path / "lxc"),
        "MUNGE_KEY_FILE": str(key),
        "CLUSTER_DIR": str(state),
        "CALLS": str(calls),
    }
    done = run_with_fakes(SLURM_FILES / "slurmd_create.sh", environment)
    assert done.returncode == 0, done.stderr
    assert len(attaches(calls)) == 2, attaches(calls)
    # The health gate finds a restarted node by its SlurmdStartTime: no marker on the host.
    assert not (state / "fresh-nodes").exists()
