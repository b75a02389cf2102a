"""The stack's registry's data directory on the host (components/containers/files/
registry_data_*.sh), run for real on temporary directories: made root's only; destroy keeps
the images and CA for the cluster's next registry, which takes them up, or removes them."""

import os
import subprocess
from pathlib import Path

from components.common.transport import INTERPRETER, script
from components.containers.registry import FILES


def run(name: str, data: Path, kept: Path, keep: str = "yes") -> subprocess.CompletedProcess:
    environment = {
        "PATH": os.environ["PATH"],
        "DATA_DIR": str(data),
        "STORE": str(data / "store"),
        "KEPT_DIR": str(kept),
        "KEEP_IMAGES": keep,
    }
    done = subprocess.run(
        [*INTERPRETER, script(FILES / name)], env=environment, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    return done


def test_destroy_keeps_the_images_and_the_next_registry_takes_them_up(tmp_path):
    data, kept = tmp_path / "cluster" / "registry", tmp_path / "keep" / "e2e" / "registry"
    run("registry_data_create.sh", data, kept)
    assert data.is_dir() and (data.stat().st_mode & 0o777) == 0o700 and (data / "store").is_dir()
    (data / "images").mkdir()
    (data / "images" / "blob").write_text("layer")
    (data / "tls").mkdir()
    (data / "tls" / "ca.key").write_text("key")
    run("registry_data_create.sh", data, kept)  # again: nothing changes
    assert (data / "images" / "blob").read_text() == "layer"
    said = run("registry_data_delete.sh", data, kept).stderr
    assert not data.exists() and (kept / "images" / "blob").read_text() == "layer"
    assert str(kept) in said
    said = run("registry_data_create.sh", data, kept).stderr
    assert (data / "images" / "blob").read_text() == "layer" and (data / "tls" / "ca.key").exists()
    assert not kept.exists() and not kept.parent.exists()
    assert "took up" in said


def test_without_keep_images_destroy_removes_them(tmp_path):
    data, kept = tmp_path / "registry", tmp_path / "keep" / "registry"
    run("registry_data_create.sh", data, kept)
    (data / "images").mkdir()
    run("registry_data_delete.sh", data, kept, keep="no")
    assert not data.exists() and not kept.exists()
    run("registry_data_delete.sh", data, kept, keep="no")  # already gone: succeeds
