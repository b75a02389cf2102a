"""The node image: what names a built image, the switch that keeps it across destroy, and the
image scripts restoring, keeping and refusing a kept image on this machine."""

import dataclasses
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from components.common.transport import script
from components.lxc import node_image
from components.lxc.config import ImageConfig
from components.lxc.node_image import image_digest
from tests.harness.command_executor import CommandFailedError, State, StateEntry, destroy_state, host_commands, up
from tests.harness.program_harness import run_program, stack_config
from tests.test_script_store import no_clobber_fails


def image_command(image: dict | None = None):
    config = stack_config("e2e")
    # The image alone: Enroot's and Pyxis' build into it is tests/containers' and the e2e's.
    config["cluster"]["containers"] = {"enabled": False}
    if image is not None:
        config["cluster"]["image"] = image
    return next(c for c in host_commands(run_program(config, stack="e2e")) if c.name == "e2e-image-rootfs")


def test_the_digest_names_what_shapes_the_image(monkeypatch, tmp_path):
    base = image_digest(ImageConfig())
    assert image_digest(ImageConfig()) == base
    assert image_digest(ImageConfig(keep=False)) == base, "keeping or not does not shape the image"
    assert image_digest(ImageConfig(extra_packages=["less"])) != base
    # The build script shapes it too: an edited one never reuses an image the old one built.
    (tmp_path / "image_create.sh").write_text((node_image.FILES / "image_create.sh").read_text() + "\n# edited\n")
    monkeypatch.setattr(node_image, "FILES", tmp_path)
    assert image_digest(ImageConfig()) != base


def test_destroy_keeps_the_image_by_default_and_the_switch_is_no_trigger():
    kept, not_kept = image_command(), image_command({"keep": False})
    assert kept.environment["KEEP_IMAGE"] == "true"
    assert kept.environment["KEPT_DIR"] == "/var/cache/gpucluster/e2e"
    assert kept.environment["IMAGE_DIGEST"] == image_digest(ImageConfig())
    assert not_kept.environment["KEEP_IMAGE"] == "false"
    # Turning the switch changes what destroy does, not the image: no replacement.
    assert not_kept.triggers == kept.triggers
    assert image_command({"extra_packages": ["less"]}).environment["IMAGE_DIGEST"] != kept.environment["IMAGE_DIGEST"]


@pytest.mark.e2e
def test_the_image_scripts_restore_keep_and_never_reuse_a_stale_image(tmp_path):
    """The real create and delete scripts with a built image staged in the kept directory (no
    lxc-create needed to restore it): create moves it in, destroy moves it back, another
    digest builds instead of restoring, and KEEP_IMAGE=false purges what was kept."""
    assert os.geteuid() == 0, "needs root: the image lives in /var/lib/lxc"
    name, image = "kimg", Path("/var/lib/lxc/kimg-image")
    assert not image.exists(), f"{image} exists: not this test's"
    kept_dir, digest = tmp_path / "kept", "0123456789abcdef"
    environment = {
        **image_command().environment,
        "CLUSTER": name,
        "CLUSTER_DIR": str(tmp_path / "state"),
        "IMAGE": image.name,
        "KEPT_DIR": str(kept_dir),
        "IMAGE_DIGEST": digest,
    }
    command = dataclasses.replace(image_command(), environment=environment, dependencies=frozenset())
    built = kept_dir / f"node-image-{digest}"
    (built / "rootfs" / "etc").mkdir(parents=True)
    (built / "rootfs" / "etc" / "built-by-test").write_text("yes\n")
    (built / "config").write_text(f"lxc.uts.name = {image.name}\nlxc.rootfs.path = dir:{image}/rootfs\n")
    (built / "gpucluster-owner").write_text(f"{name}\n")
    (built / "gpucluster-image-digest").write_text(f"{digest}\n")
    (built / "gpucluster-image-ready").touch()
    inode = (built / "rootfs").stat().st_ino
    state = State()
    try:
        up(state, [command])
        assert (image / "rootfs" / "etc" / "built-by-test").exists()
        assert (image / "rootfs").stat().st_ino == inode, "restored by a move, not a copy or a build"
        assert not built.exists()
        assert "restoring the node image" in state.resources[command.urn].stderr
        assert not (tmp_path / "state" / "pending" / image.name).exists(), "pending marker left"

        destroy_state(state)
        assert not image.exists()
        assert (built / "rootfs").stat().st_ino == inode, "destroy moved the image into the kept directory"

        # Another definition (another digest): the kept image is not restored; a build starts
        # (and fails here, on a release that does not exist) and the kept image stays as it was.
        other = dataclasses.replace(
            command, environment={**environment, "IMAGE_DIGEST": "fedcba9876543210", "RELEASE": "no-such-release"}
        )
        with pytest.raises(CommandFailedError) as failed:
            up(State(), [other])
        assert "restoring" not in str(failed.value)
        assert (built / "rootfs").stat().st_ino == inode

        # Past its age (image.kept_max_age_days), the kept image is not restored: removed, and
        # a build starts instead (failing here, on a release that does not exist).
        old = time.time() - 31 * 86400
        os.utime(built / "gpucluster-image-ready", (old, old))
        aged = dataclasses.replace(
            command, environment={**environment, "KEPT_MAX_AGE_DAYS": "30", "RELEASE": "no-such-release"}
        )
        with pytest.raises(CommandFailedError) as failed:
            up(State(), [aged])
        assert "was built over 30 days ago (image.kept_max_age_days): building it again" in str(failed.value)
        assert "restoring" not in str(failed.value) and not built.exists()
        built.mkdir(parents=True)

        # Keeping switched off: destroy purges what was kept.
        off = dataclasses.replace(command, environment={**environment, "KEEP_IMAGE": "false"})
        destroy_state(State({off.urn: StateEntry(off)}))
        assert not kept_dir.exists()
        assert not image.exists()
    finally:
        if image.exists():
            shutil.rmtree(image)


def test_the_masked_units_travel_to_the_image_script_and_shape_the_image(monkeypatch):
    assert image_command().environment["MASKED_UNITS"] == "\n".join(node_image.MASKED_UNITS)
    assert image_command().environment["PACKAGE_CACHE"] == "/var/cache/gpucluster/node-packages"
    base = image_digest(ImageConfig())
    monkeypatch.setattr(node_image, "MASKED_UNITS", [*node_image.MASKED_UNITS, "cron.service"])
    assert image_digest(ImageConfig()) != base, "an image masking other units is another image"


# lxc-create as a shell function that makes a Debian-like rootfs with units enabled; chroot
# plays apt: `update` is recorded, `install` puts a .deb in the archives (and fails with
# --no-download when it is not there yet), `clean` empties them.
FAKE_BUILD = """
lxc-create() {
  local top="$LXC_PATH/$2/rootfs" root="$LXC_PATH/$2/rootfs/etc/systemd/system"
  mkdir -p "$root"/{multi-user,getty,timers}.target.wants "$top"/etc/network "$top"/usr/sbin \\
    "$top"/var/lib/apt/lists "$top"/var/cache/apt/archives
  touch "$LXC_PATH/$2/config"
  ln -s /lib/systemd/system/networking.service "$root/multi-user.target.wants/networking.service"
  ln -s /lib/systemd/system/e2scrub_reap.service "$root/multi-user.target.wants/e2scrub_reap.service"
  ln -s /lib/systemd/system/getty@.service "$root/getty.target.wants/getty@tty1.service"
  ln -s /lib/systemd/system/fstrim.timer "$root/timers.target.wants/fstrim.timer"
}
chroot() {
  local archives="$1/var/cache/apt/archives"
  echo "$*" >> "$APT_CALLS"
  case "$*" in
    *--no-download*) [ -f "$archives/slurmd.deb" ] ;;
    *"apt-get install"*) echo deb > "$archives/slurmd.deb"; echo list > "$1/var/lib/apt/lists/bookworm" ;;
    *"apt-get clean"*) rm -f "$archives"/*.deb ;;
  esac
}
"""


def run_image_create(tmp_path: Path, lxc_path: str = "lxc", **overrides: str) -> subprocess.CompletedProcess:
    """image_create.sh with the fake build, into its own LXC path, kept images under tmp_path."""
    header = "# ---- image_create.sh ----"
    text = script(node_image.FILES / "image_create.sh").replace(header, FAKE_BUILD + header)
    calls = tmp_path / "apt-calls"
    calls.write_text("")
    environment = {
        **image_command().environment,
        "LXC_PATH": str(tmp_path / lxc_path),
        "CLUSTER_DIR": str(tmp_path / "state"),
        "KEEP_ROOT": str(tmp_path / "keep"),
        "KEPT_DIR": str(tmp_path / "keep" / "e2e"),
        "PACKAGE_CACHE": str(tmp_path / "packages"),
        "APT_CALLS": str(calls),
        "PATH": os.environ["PATH"],
        **overrides,
    }
    (tmp_path / "state").mkdir(exist_ok=True)
    return subprocess.run(["/bin/bash", "-c", text], env=environment, capture_output=True, text=True, check=False)


def build_image(tmp_path: Path, lxc_path: str = "lxc") -> tuple[Path, list[str]]:
    """The image's rootfs and apt's calls, after image_create.sh with the fake build."""
    done = run_image_create(tmp_path, lxc_path)
    assert done.returncode == 0, done.stderr
    return tmp_path / lxc_path / image_command().environment["IMAGE"] / "rootfs", (
        tmp_path / "apt-calls"
    ).read_text().splitlines()


def test_the_image_masks_the_units_a_node_never_uses(tmp_path):
    rootfs, _ = build_image(tmp_path)
    units = rootfs / "etc" / "systemd" / "system"
    for unit in node_image.MASKED_UNITS:
        assert os.readlink(units / unit) == "/dev/null", f"{unit} is not masked"
    wanted = sorted(str(p.relative_to(units)) for p in units.glob("*.wants/*"))
    # Enabled: networking, and the program's own timer (a node starts with it, lib/node_files.sh).
    assert wanted == [
        "multi-user.target.wants/networking.service",
        "timers.target.wants/gpucluster-job-files.timer",
    ], "a masked unit is still enabled"


def test_the_image_holds_the_nodes_own_files(tmp_path):
    """Written once into the image, so a node's slurmd create changes none of them (no systemd
    reload per node): the daemons' OOM drop-ins, the job files' program, its service and timer."""
    rootfs, _ = build_image(tmp_path)
    units = rootfs / "etc" / "systemd" / "system"
    for unit in ("slurmd", "munge"):
        assert (units / f"{unit}.service.d" / "gpucluster-oom.conf").read_text() == "[Service]\nOOMScoreAdjust=-1000\n"
    reaper = rootfs / "usr" / "local" / "sbin" / "gpucluster-job-files"
    assert reaper.read_text() == node_image.JOB_FILES_REAPER_SOURCE.read_text()
    assert os.stat(reaper).st_mode & 0o777 == 0o755
    assert "OnUnitActiveSec=30" in (units / "gpucluster-job-files.timer").read_text()
    assert os.readlink(units / "timers.target.wants" / "gpucluster-job-files.timer") == str(
        Path("/etc/systemd/system/gpucluster-job-files.timer")
    )


def test_the_image_digest_follows_the_nodes_own_files(monkeypatch, tmp_path):
    image = ImageConfig()
    before = node_image.image_digest(image)
    changed = tmp_path / "reaper.sh"
    changed.write_text(node_image.JOB_FILES_REAPER_SOURCE.read_text() + "# changed\n")
    monkeypatch.setattr(node_image, "JOB_FILES_REAPER_SOURCE", changed)
    assert node_image.image_digest(image) != before


def test_a_rebuilt_image_installs_its_packages_from_the_hosts_cache(tmp_path):
    rootfs, calls = build_image(tmp_path, "first")
    assert any("apt-get update" in call for call in calls), "the first build reads the mirror"
    cache = tmp_path / "packages" / "bookworm"
    assert (cache / "archives" / "slurmd.deb").exists() and (cache / "lists" / "bookworm").exists()
    assert not (rootfs / "var" / "cache" / "apt" / "archives" / "slurmd.deb").exists(), "the image keeps .debs"
    assert not (rootfs / "usr" / "sbin" / "policy-rc.d").exists()
    # The next build (another cluster, or the image rebuilt): no update, no download.
    _, calls = build_image(tmp_path, "second")
    assert not any("apt-get update" in call for call in calls)
    assert [call for call in calls if "apt-get install" in call][-1].endswith("--no-download")


def test_a_rebuild_keeps_the_cached_packages_where_cp_fails_on_a_skipped_file(tmp_path, monkeypatch):
    """Under a `cp` and `mv` that fail on a skipped `-n` file (coreutils 9.2 to 9.4, Ubuntu
    24.04's), first on the PATH core.sh sets: the second build finds its .deb in the cache and
    keeps that one."""
    build_image(tmp_path, "first")
    cached = tmp_path / "packages" / "bookworm" / "archives" / "slurmd.deb"
    cached.write_text("the cache's own\n")
    stand_ins = no_clobber_fails(tmp_path)
    bin_dir = stand_ins["PATH"].split(":")[0]
    with_stand_ins = script(node_image.FILES / "image_create.sh").replace("export PATH=", f"export PATH={bin_dir}:", 1)
    monkeypatch.setattr(f"{__name__}.script", lambda path: with_stand_ins)
    done = run_image_create(tmp_path, "second", CALLS=stand_ins["CALLS"])
    assert done.returncode == 0, done.stderr
    assert "/cp " in Path(stand_ins["CALLS"]).read_text()
    assert cached.read_text() == "the cache's own\n"
    assert sorted(p.name for p in cached.parent.iterdir()) == ["slurmd.deb"]


def stage_image(directory: Path, name: str, digest: str, age_days: float = 0) -> Path:
    """A built image as image_create.sh leaves it (or destroy keeps it), of cluster `name`."""
    (directory / "rootfs" / "etc").mkdir(parents=True)
    (directory / "rootfs" / "etc" / "built-by").write_text(f"{name}\n")
    (directory / "config").write_text(
        f"lxc.rootfs.path = dir:/var/lib/lxc/{name}-image/rootfs\n"
        "lxc.include = /usr/share/lxc/config/debian.common.conf\n"
        f"lxc.uts.name = {name}-image\n"
    )
    (directory / "gpucluster-owner").write_text(f"{name}\n")
    (directory / "gpucluster-image-digest").write_text(f"{digest}\n")
    (directory / "gpucluster-image-ready").touch()
    if age_days:
        old = time.time() - age_days * 86400
        os.utime(directory / "gpucluster-image-ready", (old, old))
    return directory


@pytest.mark.parametrize("where", ["kept by another cluster", "kept on another host", "in use by another cluster"])
def test_a_second_cluster_copies_the_image_of_the_same_definition(tmp_path, where):
    digest = image_command().environment["IMAGE_DIGEST"]
    source = {
        "kept by another cluster": tmp_path / "keep" / "other" / f"node-image-{digest}",
        "kept on another host": tmp_path / "keep" / "other" / "h2" / f"node-image-{digest}",
        "in use by another cluster": tmp_path / "lxc" / "other-image",
    }[where]
    stage_image(source, "other", digest, age_days=2)
    before = sorted(str(p) for p in source.rglob("*"))
    done = run_image_create(tmp_path)
    assert done.returncode == 0, done.stderr
    image = tmp_path / "lxc" / "e2e-image"
    assert f"node image copied from {source} (the same definition)" in done.stderr
    assert (tmp_path / "apt-calls").read_text() == "", "a copy installs nothing"
    assert (image / "rootfs" / "etc" / "built-by").read_text() == "other\n"
    assert (image / "config").read_text() == (
        f"lxc.rootfs.path = dir:{image}/rootfs\nlxc.include = /usr/share/lxc/config/debian.common.conf\n"
        "lxc.uts.name = e2e-image\n"
    )
    assert (image / "gpucluster-owner").read_text() == "e2e\n"
    assert (image / "gpucluster-image-digest").read_text() == f"{digest}\n"
    # The copy is as old as its source: the age limit still counts from the build.
    assert (
        abs((image / "gpucluster-image-ready").stat().st_mtime - (source / "gpucluster-image-ready").stat().st_mtime)
        < 1
    )
    assert sorted(str(p) for p in source.rglob("*")) == before, "the source changed"
    assert (source / "gpucluster-owner").read_text() == "other\n"


@pytest.mark.parametrize(
    ("what", "digest", "age_days", "keep"),
    [
        ("another definition", "0123456789abcdef", 0, "true"),
        ("past its age", None, 31, "true"),
        ("keeping switched off", None, 0, "false"),
    ],
)
def test_an_image_of_another_definition_age_or_with_keeping_off_is_built_not_copied(
    tmp_path, what, digest, age_days, keep
):
    source = tmp_path / "keep" / "other" / f"node-image-{image_command().environment['IMAGE_DIGEST']}"
    stage_image(source, "other", digest or image_command().environment["IMAGE_DIGEST"], age_days)
    done = run_image_create(tmp_path, KEEP_IMAGE=keep, KEPT_MAX_AGE_DAYS="30")
    assert done.returncode == 0, done.stderr
    assert "copied" not in done.stderr, what
    assert any("apt-get install" in call for call in (tmp_path / "apt-calls").read_text().splitlines()), what
    assert source.exists(), "another cluster's kept image is never removed"


def test_a_copy_cut_short_is_removed_and_the_source_never_touched(tmp_path):
    """An interrupted copy leaves no config naming the source: the next create removes the
    half-copied image (lxc-destroy follows the config's rootfs) and copies again."""
    digest = image_command().environment["IMAGE_DIGEST"]
    source = stage_image(tmp_path / "keep" / "other" / f"node-image-{digest}", "other", digest)
    image = tmp_path / "lxc" / "e2e-image"
    (image / "rootfs" / "etc").mkdir(parents=True)  # what a copy cut short leaves, with the pending marker
    (tmp_path / "state" / "pending").mkdir(parents=True)
    (tmp_path / "state" / "pending" / "e2e-image").touch()
    done = run_image_create(tmp_path)
    assert done.returncode == 0, done.stderr
    assert "removing e2e-image left half-built" in done.stderr and "copied" in done.stderr
    assert (source / "rootfs" / "etc" / "built-by").exists()
    assert (image / "gpucluster-owner").read_text() == "e2e\n"


def test_each_release_has_its_packages_and_its_own_image():
    from components.lxc.config import RELEASES
    from components.lxc.node_image import image_digest, image_fingerprint, image_packages

    bookworm, trixie = ImageConfig(), ImageConfig(release="trixie")
    # bookworm's definition is the one before releases were configurable: its kept images stay valid.
    assert image_fingerprint(bookworm) == ["bookworm", *node_image.IMAGE_PACKAGES]
    assert image_packages(trixie)[: len(RELEASES["trixie"].packages)] == list(RELEASES["trixie"].packages)
    assert image_digest(bookworm) != image_digest(trixie)
    assert image_fingerprint(trixie)[0] == "trixie"


def test_an_unknown_release_is_refused_naming_the_choices():
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match=r"bookworm.*trixie"):
        ImageConfig(release="bullseye")
