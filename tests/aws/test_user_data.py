"""The first boot's user data: a pure function, valid for Debian's cloud-init, carrying exactly
the drop-in the SSH transport manages."""

import re
import subprocess

import pytest
import yaml

from components.aws.user_data import ACCEPT_ENV_DROPIN, STATE_MOUNT_POINT, StateVolume, render_user_data
from components.aws.user_data import FILES as AWS_FILES
from components.common.transport import FILES
from tests.harness.command_executor import unwrap
from tests.harness.program_harness import run_program, stack_config

LOGIN = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBm0Rn0YmGn2KF5Zj9J5lI2qOQX6f3tH6tq6mFJ3qHzK ops@site"
VOLUME = StateVolume("vol-0123456789abcdef0", ("/var/lib/lxc", "/srv/gpucluster/cloud/shared", "/var/lib/gpucluster"))


def schema(text: str, tmp_path) -> subprocess.CompletedProcess:
    path = tmp_path / "user-data"
    path.write_text(text)
    return subprocess.run(
        ["cloud-init", "schema", "--config-file", str(path)], capture_output=True, text=True, check=False
    )


def test_the_user_data_is_a_pure_function_of_its_inputs():
    first = render_user_data("cloud", LOGIN, VOLUME)
    assert first == render_user_data("cloud", LOGIN, VOLUME)
    assert first != render_user_data("other", LOGIN, VOLUME)
    config = yaml.safe_load(first)
    assert first.startswith("#cloud-config\n")
    # The instance makes its own host key and prints it to the console: no key in the user data.
    assert "ssh_keys" not in config and "PRIVATE" not in first
    assert config["ssh_genkeytypes"] == ["ed25519"] and config["ssh_deletekeys"] is True
    assert config["ssh"] == {"emit_keys_to_console": True} and config["ssh_key_console_blacklist"] == []
    assert config["disable_root"] is False and config["ssh_authorized_keys"] == [LOGIN]
    (dropin,) = config["write_files"]
    assert dropin["path"] == "/etc/ssh/sshd_config.d/gpucluster-cloud.conf"
    assert dropin["content"] == ACCEPT_ENV_DROPIN


def test_the_state_volume_is_mounted_at_every_boot_before_sshd():
    ((sh, flag, text, name, mount_point, devices, *directories),) = yaml.safe_load(
        render_user_data("cloud", LOGIN, VOLUME)
    )["bootcmd"]
    assert (sh, flag, name, mount_point) == ("sh", "-c", "gpucluster-state-volume", STATE_MOUNT_POINT)
    assert text == (AWS_FILES / "state_volume.sh").read_text()
    assert devices.split() == [
        "/dev/disk/by-id/nvme-Amazon_Elastic_Block_Store_vol0123456789abcdef0", "/dev/xvdf", "/dev/sdf"
    ]  # fmt: skip
    assert directories == ["/var/lib/gpucluster", "/var/lib/lxc", "/srv/gpucluster/cloud/shared"]
    nested = StateVolume("vol-0123456789abcdef0", ("/srv/a/b", "/srv/a", "/srv/a"))
    assert nested.bind_order == ["/srv/a", "/srv/a/b"]  # a parent before what is inside it, each once


def test_the_drop_in_is_byte_for_byte_the_one_the_transport_writes():
    """sshd_accept_env_create.sh then finds it in place and leaves sshd alone."""
    script = (FILES / "sshd_accept_env_create.sh").read_text()
    (printf,) = re.findall(r"printf '([^']*AcceptEnv[^']*)'", script)
    assert printf.encode().decode("unicode_escape") % ("root", "") == ACCEPT_ENV_DROPIN


@pytest.fixture(scope="module")
def cloud_init():
    done = subprocess.run(["cloud-init", "--version"], capture_output=True, text=True, check=False)
    assert done.returncode == 0, "cloud-init is missing: install tests/debian-packages.txt (bash .ci/run does)"


def test_the_programs_user_data_passes_cloud_inits_schema(cloud_init, tmp_path):
    run = run_program(stack_config("ec2"), stack="ec2", secrets={"awsSshKey": "key"})
    for host in ("cloud1", "cloud2"):
        user_data = unwrap(run.by_name(f"cloud-{host}-ec2-instance").inputs["userData"])
        checked = schema(user_data, tmp_path)
        assert checked.returncode == 0 and "Valid cloud-config" in checked.stdout, checked.stdout + checked.stderr


def test_a_broken_user_data_fails_the_schema(cloud_init, tmp_path):
    broken = render_user_data("cloud", LOGIN, VOLUME).replace("ssh_deletekeys: true", "ssh_deletekeys: 7")
    checked = schema(broken, tmp_path)
    assert checked.returncode != 0 and "ssh_deletekeys" in checked.stdout + checked.stderr
