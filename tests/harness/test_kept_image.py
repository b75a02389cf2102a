"""Lending one test cluster's kept node image to another: moved with its config renamed, and back."""

from tests.harness.command_executor import HostCommand
from tests.harness.kept_image import lent_image

CONFIG = (
    "lxc.rootfs.path = dir:/var/lib/lxc/{name}-image/rootfs\n"
    "lxc.net.0.type = veth\n"
    "lxc.uts.name = {name}-image\n"
    "lxc.include = /usr/share/lxc/config/debian.common.conf\n"
)


def image_command(keep_dir, cluster: str) -> HostCommand:
    return HostCommand(
        name=f"{cluster}-image-rootfs",
        urn=f"urn:{cluster}-image-rootfs",
        create="",
        update=None,
        delete=None,
        environment={"CLUSTER": cluster, "KEPT_DIR": str(keep_dir / cluster), "IMAGE_DIGEST": "abc"},
        interpreter=("/bin/bash", "-c"),
        dependencies=frozenset(),
    )


def kept(keep_dir, cluster: str, owner: str):
    image = keep_dir / cluster / "node-image-abc"
    image.mkdir(parents=True)
    (image / "config").write_text(CONFIG.format(name=owner))
    (image / "gpucluster-image-ready").touch()
    (image / "rootfs").mkdir()
    return image


def test_the_image_goes_to_the_borrower_renamed_and_comes_back(tmp_path):
    kept(tmp_path, "e2e", "e2e")
    with lent_image("e2e", [image_command(tmp_path, "e2r")]) as lent:
        assert lent and not (tmp_path / "e2e").exists()
        borrowed = tmp_path / "e2r" / "node-image-abc"
        assert (borrowed / "config").read_text() == CONFIG.format(name="e2r")
        assert (borrowed / "rootfs").is_dir()
    assert (tmp_path / "e2e" / "node-image-abc" / "config").read_text() == CONFIG.format(name="e2e")
    assert not (tmp_path / "e2r").exists()


def test_nothing_is_lent_when_the_borrower_has_its_own_or_the_owner_none(tmp_path):
    with lent_image("e2e", [image_command(tmp_path, "e2r")]) as lent:
        assert not lent
    kept(tmp_path, "e2e", "e2e")
    own = kept(tmp_path, "e2r", "e2r")
    with lent_image("e2e", [image_command(tmp_path, "e2r")]) as lent:
        assert not lent
    assert (own / "config").read_text() == CONFIG.format(name="e2r")
    assert (tmp_path / "e2e" / "node-image-abc").exists()


def test_an_image_the_borrower_did_not_keep_again_stays_gone(tmp_path):
    """A failed run whose destroy kept nothing: the owner's image is not conjured back."""
    kept(tmp_path, "e2e", "e2e")
    with lent_image("e2e", [image_command(tmp_path, "e2r")]):
        (tmp_path / "e2r" / "node-image-abc" / "gpucluster-image-ready").unlink()
    assert not (tmp_path / "e2e" / "node-image-abc").exists()
