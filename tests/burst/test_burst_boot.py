"""The boot of a burst node: the user data the resume program launches with, and the munge
key's round trip through Secrets Manager (moto) from the controller to the node."""

import importlib
import io
import os
import re
import subprocess
import sys

import pytest
from moto import mock_aws

from components.burst.user_data import NODE_PLACEHOLDER, for_node, render_user_data
from components.slurm.slurm_conf import render_slurm_conf
from components.stack_config import parse_stack_config
from tests.burst.moto_ec2 import AwsWorld, FakeSlurm
from tests.burst.stack import burst_stack

burst_common = importlib.import_module("burst_common")
store_munge_key = importlib.import_module("store_munge_key")
resume = importlib.import_module("resume")

SECRET = "gpucluster/gpu/munge-key"
SOCKET = "/run/gpucluster-gpu/munge.socket"
KEY = bytes(range(256)) * 4  # 1024 bytes, as the cluster makes them


def test_the_user_data_is_bash_that_starts_munged_then_slurmd_configless_with_the_name():
    text = for_node(render_user_data("10.42.3.2", "us-east-1", SECRET, None, SOCKET), "burst-2")
    assert subprocess.run(["bash", "-n"], input=text, text=True, check=False).returncode == 0
    assert text.startswith("#!/bin/bash\n") and NODE_PLACEHOLDER not in text
    assert "NODE_NAME=burst-2\n" in text and "CONTROLLER=10.42.3.2\n" in text
    assert text.index("systemctl restart munge") < text.index("systemctl restart slurmd")
    assert 'SLURMD_OPTIONS="--conf-server %s:6817 -N %s"' in text


def imds_rule(text: str) -> str:
    return re.search(r'^IMDS_RULE="([^"]+)"$', text, re.M).group(1)


def test_only_root_may_reach_the_metadata_service_before_any_job_can_start():
    """N2: the rule is in place before the key is fetched and slurmd starts, and slurmd's
    every start puts it back (a reboot loses iptables rules)."""
    text = for_node(render_user_data("10.42.3.2", "us-east-1", SECRET, None, SOCKET), "burst-2")
    rule = imds_rule(text)
    assert rule == "OUTPUT -d 169.254.169.254/32 -m owner ! --uid-owner 0 -j REJECT"
    assert text.index("iptables -w -I $IMDS_RULE") < text.index("get_secret_value") < text.index("restart slurmd")
    assert "ExecStartPre=" in text and "slurmd.service.d/gpucluster-imds.conf" in text
    assert "exit 1; }" in text[text.index("command -v iptables") :]  # no iptables: no node, never an open IMDS


@pytest.mark.privileged
def test_the_rule_refuses_the_metadata_service_to_every_user_but_root(tmp_path):
    """N2, for real: in a network namespace of its own, a stand-in metadata service at
    169.254.169.254 behind the boot script's rule: root is answered, another uid is refused."""
    if os.geteuid() != 0:
        pytest.skip("needs root (a network namespace, iptables)")
    rule = imds_rule(render_user_data("10.42.3.2", "us-east-1", SECRET, None, SOCKET))
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import urllib.request\n"
        "try:\n"
        "    print(urllib.request.urlopen('http://169.254.169.254:80/latest/api/token', timeout=3).read().decode())\n"
        "except OSError as error:\n"
        "    print('refused', error)\n"
    )
    probe.chmod(0o644)
    tmp_path.chmod(0o755)
    inside = f"""
set -e
ip link set lo up
ip addr add 169.254.169.254/32 dev lo
cd {tmp_path} && mkdir -p latest/api && echo TOKEN > latest/api/token
/usr/bin/python3 -m http.server 80 --bind 169.254.169.254 >/dev/null 2>&1 &
sleep 1
iptables -w -I {rule}
echo "root: $(/usr/bin/python3 {probe})"
echo "user: $(setpriv --reuid=65534 --regid=65534 --clear-groups /usr/bin/python3 - < {probe})"
kill %1
"""
    done = subprocess.run(["unshare", "--net", "bash", "-c", inside], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "root: TOKEN" in done.stdout, done.stdout
    assert "user: refused" in done.stdout and "TOKEN" not in done.stdout.split("user:")[1], done.stdout


def test_slurmd_finds_munge_at_the_socket_slurm_conf_names():
    """Configless slurmd reads AuthInfo from the controller's slurm.conf: that path must answer."""
    config = parse_stack_config(burst_stack()).cluster
    auth = next(line for line in render_slurm_conf(config, "c000").splitlines() if line.startswith("AuthInfo="))
    socket = auth.removeprefix("AuthInfo=socket=")
    text = render_user_data("10.42.3.2", "us-east-1", SECRET, None, config.munge_socket)
    assert f"MUNGE_SOCKET={socket}\n" in text
    assert text.index("systemd-tmpfiles --create") < text.index("systemctl restart munge")


def test_a_launch_without_a_name_is_no_node():
    text = render_user_data("10.42.3.2", "us-east-1", SECRET, None, SOCKET)
    assert "NODE_NAME=@NODE_NAME@" in text and "not a node of the cluster" in text


def test_values_that_could_break_out_of_the_script_are_refused():
    with pytest.raises(ValueError, match="@SECRET_ID@"):
        render_user_data("10.42.3.2", "us-east-1", "x; curl evil", None, SOCKET)


@pytest.fixture
def world(tmp_path, monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    with mock_aws():
        made = AwsWorld(tmp_path)
        monkeypatch.setenv(burst_common.CONFIG_ENV, str(made.config_file))
        yield made


def test_the_munge_key_goes_from_the_controller_to_the_node_through_the_secret_only(world, tmp_path, monkeypatch):
    import boto3

    secrets = boto3.client("secretsmanager", region_name="us-east-1")
    secrets.create_secret(Name=SECRET, Description="made by the program (no value)")
    # The controller puts the key it has (stdin, never argv).
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(KEY)))
    assert store_munge_key.main(SECRET) == 0
    # A node launched by the resume program: its user data holds no key.
    os.environ["SLURM_RESUME_FILE"] = str(world.config_file)
    try:
        resume.main(["resume", "burst-1"], slurm=FakeSlurm(), ec2=burst_common.ec2_client(world.config))
    finally:
        del os.environ["SLURM_RESUME_FILE"]
    (instance,) = world.live()
    user_data = world.user_data_of(instance["InstanceId"])
    assert KEY.hex() not in user_data.encode().hex() and "NODE_NAME=burst-1\n" in user_data
    # The boot's own fetch (its Python, as the instance runs it) writes the controller's key.
    fetch = re.search(r"<<'PY'\n(.*?)\nPY\n", user_data, re.S).group(1)
    out = tmp_path / "munge.key.new"
    monkeypatch.setenv("REGION", "us-east-1")
    monkeypatch.setenv("SECRET_ID", SECRET)
    monkeypatch.setenv("ENDPOINT", "")
    monkeypatch.setenv("KEY_OUT", str(out))
    exec(compile(fetch, "boot_node.sh", "exec"), {})
    assert out.read_bytes() == KEY


# ---- N4: the cluster's people and shared_dir on a burst node ----

PEOPLE = ["alice:2101:2101:alice", "bob:2102:2200:lab"]


def test_the_people_and_the_shared_mount_are_in_place_before_slurmd_starts():
    text = for_node(
        render_user_data("10.42.3.2", "us-east-1", SECRET, None, SOCKET, PEOPLE, "/srv/shared", "10.42.3.1:2049:/x"),
        "burst-1",
    )
    assert subprocess.run(["bash", "-n"], input=text, text=True, check=False).returncode == 0
    assert "PEOPLE=alice:2101:2101:alice,bob:2102:2200:lab\n" in text
    assert "SHARED_DIR=/srv/shared\n" in text and "SHARED_MOUNT=10.42.3.1:2049:/x\n" in text
    assert text.index("useradd") < text.index("mount -t nfs4") < text.index("systemctl restart slurmd")
    with pytest.raises(ValueError, match="@PEOPLE@"):
        render_user_data("10.42.3.2", "us-east-1", SECRET, None, SOCKET, ["eve:1:1:eve; reboot"])


def people_and_mount_block(text: str) -> str:
    start = text.index("# The cluster's people (users[])")
    return text[start : text.index("# Configless:")]


def test_the_boot_makes_each_person_and_mounts_the_share_as_the_hosts_do(tmp_path):
    """The boot's own block, run with the system commands it calls stood in (they log)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "calls"
    for name, body in {
        "getent": "exit 2",  # nobody exists yet
        "groupadd": 'echo "groupadd $*" >> "$LOG"',
        "useradd": 'echo "useradd $*" >> "$LOG"',
        "mount": 'echo "mount $*" >> "$LOG"; touch "$MOUNTED"',
        "mountpoint": '[ -e "$MOUNTED" ]',
        "sleep": "true",
    }.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    text = render_user_data(
        "10.42.3.2", "us-east-1", SECRET, None, SOCKET, PEOPLE, str(tmp_path / "shared"), "10.42.3.1:2049:/gpucluster-x"
    )
    assignments = "".join(
        line + "\n" for line in text.splitlines() if line.split("=")[0] in ("PEOPLE", "SHARED_DIR", "SHARED_MOUNT")
    )
    done = subprocess.run(
        ["bash", "-c", "set -euo pipefail\n" + assignments + people_and_mount_block(text)],
        env={"PATH": f"{bin_dir}:/usr/bin:/bin", "LOG": str(log), "MOUNTED": str(tmp_path / "mounted")},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr + done.stdout
    assert log.read_text().splitlines() == [
        "groupadd -g 2101 alice",
        "useradd -m -u 2101 -g 2101 -s /bin/bash alice",
        "groupadd -g 2200 lab",
        "useradd -m -u 2102 -g 2200 -s /bin/bash bob",
        f"mount -t nfs4 -o port=2049,hard 10.42.3.1:/gpucluster-x {tmp_path / 'shared'}",
    ]
    assert (tmp_path / "shared").is_dir()


def test_shared_dir_and_its_parents_are_open_to_every_user_after_the_key_s_umask(tmp_path):
    """The boot writes the munge key under `umask 077`; shared_dir and the parents it makes
    must still let every user's job through (a job of bstuser on a burst node could not open
    its output file in shared_dir: the e2e test, tests/burst/test_e2e_burst.py)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in {"getent": "exit 0", "mountpoint": "exit 0"}.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    shared = tmp_path / "srv" / "gpucluster" / "x" / "shared"
    text = render_user_data("10.42.3.2", "us-east-1", SECRET, None, SOCKET, (), str(shared), "10.42.3.1:2049:/x")
    assignments = "".join(
        line + "\n" for line in text.splitlines() if line.split("=")[0] in ("PEOPLE", "SHARED_DIR", "SHARED_MOUNT")
    )
    done = subprocess.run(
        ["bash", "-c", "set -euo pipefail\numask 077\n" + assignments + people_and_mount_block(text)],
        env={"PATH": f"{bin_dir}:/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr + done.stdout
    modes = {str(d.relative_to(tmp_path)): oct(d.stat().st_mode & 0o777) for d in (shared, *shared.parents[:3])}
    assert modes == {
        "srv/gpucluster/x/shared": "0o755", "srv/gpucluster/x": "0o755", "srv/gpucluster": "0o755", "srv": "0o755"
    }, modes  # fmt: skip
