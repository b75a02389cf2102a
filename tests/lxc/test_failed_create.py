"""A node container's create that fails late (after the container was made) leaves nothing the
state does not know: it removes the container it made. One that was there before the create
(an update, an adopted container) is never removed by a failure."""

from pathlib import Path

from components.common.transport import script
from components.lxc.cuda_container import FILES as LXC_FILES
from tests.lxc.test_node_attaches import FAKES, bash, node_create_environment

# lxc-copy makes an overlay clone of t-image, lxc-destroy removes it; the boot answers with an
# address that is not the node's, which fails the create after its container runs.
FAILING = """
lxc-copy() {
  lxc_fake lxc-copy "$@"
  mkdir -p "$LXC_PATH/t-c000/overlay/delta"
  printf 'lxc.rootfs.path = overlay:%s/t-image/rootfs:%s/t-c000/overlay/delta\\n' "$LXC_PATH" "$LXC_PATH" \\
    > "$LXC_PATH/t-c000/config"
}
lxc-destroy() { lxc_fake lxc-destroy "$@"; rm -rf "$LXC_PATH/t-c000"; }
lxc-attach() { lxc_fake lxc-attach "$@"; cat > /dev/null; printf 'running\\n 10.9.9.9/24\\nc000\\n'; }
"""


def create(tmp_path: Path) -> tuple[int, str, list[str]]:
    calls = tmp_path / "calls"
    calls.touch()
    image = tmp_path / "lxc" / "t-image"
    (image / "rootfs" / "etc").mkdir(parents=True)
    (image / "rootfs" / "etc" / "hosts").write_text("127.0.1.1\tt-image\n")
    (image / "config").write_text(f"lxc.rootfs.path = dir:{image}/rootfs\n")
    environment = node_create_environment(tmp_path, calls)
    path = LXC_FILES / "container_create.sh"
    header = f"# ---- {path.name} ----"
    done = bash(script(path).replace(header, FAKES + FAILING + header), env=environment)
    return done.returncode, done.stderr, calls.read_text().splitlines()


def test_a_create_that_fails_late_removes_the_container_it_made(tmp_path):
    status, stderr, calls = create(tmp_path)
    assert status != 0
    assert "has no address" in stderr and "removing the container it made" in stderr
    assert any(c.startswith("lxc-copy") for c in calls) and any(c.startswith("lxc-start") for c in calls)
    assert any(c.startswith("lxc-destroy -n t-c000") for c in calls), calls
    assert not (tmp_path / "lxc" / "t-c000").exists()
    assert not (tmp_path / "state" / "pending" / "t-c000").exists()
    assert (tmp_path / "lxc" / "t-image" / "config").exists(), "the image went too"


def test_a_failed_create_keeps_a_container_that_was_there(tmp_path):
    container = tmp_path / "lxc" / "t-c000"
    (container / "overlay" / "delta").mkdir(parents=True)
    (container / "config").write_text(
        f"lxc.rootfs.path = overlay:{tmp_path}/lxc/t-image/rootfs:{container}/overlay/delta\n"
    )
    (container / "gpucluster-owner").write_text("t\n")
    status, stderr, calls = create(tmp_path)
    assert status != 0 and "has no address" in stderr
    assert not any(c.startswith(("lxc-copy", "lxc-destroy")) for c in calls), calls
    assert (container / "config").exists() and (container / "gpucluster-owner").read_text() == "t\n"
