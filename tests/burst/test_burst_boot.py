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
from components.composition.stack_config import parse_stack_config
from tests.burst.moto_ec2 import AwsWorld, FakeSlurm
from tests.burst.stack import burst_stack
from tests.harness.program_harness import slurm_conf_of

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
    auth = next(line for line in slurm_conf_of(config, "c000").splitlines() if line.startswith("AuthInfo="))
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


# ---- The whole boot, run: its files under a root of the test's own, the system commands it
# calls stood in (they log to CALLS), the image's accounts in ACCOUNTS (passwd, group) ----

DEBIAN_AMI_ACCOUNTS = {  # Debian's cloud image: cloud-init's default user (docs/burst.md)
    "passwd": "root:x:0:0:root:/root:/bin/bash\nadmin:x:1000:1000:Debian:/home/admin:/bin/bash\n",
    "group": "root:x:0:\nadm:x:4:admin\nadmin:x:1000:\n",
}
STUBS = {
    "hostnamectl": "true",
    "hostname": "true",  # never this machine's
    "iptables": '[ "$2" = -C ] && exit 1; echo "iptables $*" >> "$CALLS"',
    "systemctl": 'echo "systemctl $*" >> "$CALLS"',
    "systemd-tmpfiles": "true",
    "install": 'for last; do :; done; mkdir -p "$last"',  # install -d [-o -g -m] DIR
    "chown": "true",
    # The key's fetch: Secrets Manager answers (or, with KEY_FAILS, refuses).
    "python3": (
        'cat >/dev/null; [ -z "$KEY_FAILS" ] || { echo AccessDeniedException >&2; exit 1; }; printf k > "$KEY_OUT"'
    ),
    # getent DB KEY: by name, or by id (the third field) when KEY is a number.
    "getent": (
        "case $2 in *[!0-9]*) f=1 ;; *) f=3 ;; esac\n"
        'awk -F: -v k="$2" -v f="$f" \'$f == k {print; found=1} END {exit !found}\' "$ACCOUNTS/$1" || exit 2'
    ),
    # groupadd -g GID NAME and useradd ... -u UID -g GID ... NAME, refusing what exists, as they do.
    "groupadd": (
        'getent group "$2" >/dev/null && { echo "GID $2 exists" >&2; exit 4; }\n'
        'getent group "$3" >/dev/null && { echo "group $3 exists" >&2; exit 9; }\n'
        'echo "$3:x:$2:" >> "$ACCOUNTS/group"; echo "groupadd $*" >> "$CALLS"'
    ),
    "useradd": (
        'args="$*"\n'
        'while [ "$#" -gt 1 ]; do case $1 in -u) uid=$2; shift 2 ;; -g) gid=$2; shift 2 ;; -s|-d) shift 2 ;;'
        " *) shift ;; esac; done\n"
        'getent passwd "$uid" >/dev/null && { echo "UID $uid exists" >&2; exit 4; }\n'
        'getent passwd "$1" >/dev/null && { echo "user $1 exists" >&2; exit 9; }\n'
        'echo "$1:x:$uid:$gid::/home/$1:/bin/bash" >> "$ACCOUNTS/passwd"; echo "useradd $args" >> "$CALLS"'
    ),
    "mount": 'echo "mount $*" >> "$CALLS"; [ -z "$MOUNT_FAILS" ] || exit 32; touch "$MOUNTED"',
    "mountpoint": '[ -e "$MOUNTED" ]',
    "sleep": "true",
    "scontrol": 'echo "scontrol $* (SLURM_CONF_SERVER=$SLURM_CONF_SERVER)" >> "$CALLS"',
}


class Boot:
    """One run of a burst node's boot (burst-1), in `root`."""

    def __init__(self, tmp_path, people=(), shared_mount="", accounts=None, **env):
        self.root, self.calls_file = tmp_path / "root", tmp_path / "calls"
        self.shared = tmp_path / "srv" / "gpucluster" / "x" / "shared"
        bin_dir, account_dir = tmp_path / "bin", tmp_path / "accounts"
        image = [self.root / d for d in ("etc/tmpfiles.d", "etc/default", "etc/systemd/system", "var/log", "dev")]
        for directory in (bin_dir, account_dir, *image):
            directory.mkdir(parents=True)
        for name, body in STUBS.items():
            (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
            (bin_dir / name).chmod(0o755)
        for name, text in (accounts or {"passwd": "root:x:0:0::/root:/bin/bash\n", "group": "root:x:0:\n"}).items():
            (account_dir / name).write_text(text)
        (self.root / "etc/fstab").write_text("# the image's\n")
        text = for_node(
            render_user_data("10.42.3.2", "us-east-1", SECRET, None, SOCKET, people, str(self.shared), shared_mount),
            "burst-1",
        )
        for path in ("/etc/", "/var/log/", "/dev/console"):  # every file the boot writes, under root
            text = text.replace(path, f"{self.root}{path}")
        script = tmp_path / "boot.sh"
        script.write_text(text)
        environment = {"PATH": f"{bin_dir}:/usr/bin:/bin", "CALLS": str(self.calls_file)}
        environment |= {"ACCOUNTS": str(account_dir), "MOUNTED": str(tmp_path / "mounted"), **env}
        self.done = subprocess.run(["bash", str(script)], env=environment, capture_output=True, text=True, timeout=60)

    @property
    def calls(self) -> list[str]:
        return self.calls_file.read_text().splitlines() if self.calls_file.exists() else []

    def file(self, path: str) -> str:
        return (self.root / path.lstrip("/")).read_text()

    @property
    def log(self) -> str:
        return self.file("/var/log/gpucluster-burst-boot.log")


def test_the_boot_makes_each_person_and_mounts_the_share_as_the_hosts_do(tmp_path):
    boot = Boot(tmp_path, PEOPLE, "10.42.3.1:2049:/gpucluster-x")
    assert boot.done.returncode == 0, boot.log
    made = [c for c in boot.calls if c.split()[0] in ("groupadd", "useradd", "mount")]
    assert made == [
        "groupadd -g 2101 alice",
        "useradd -m -u 2101 -g 2101 -s /bin/bash alice",
        "groupadd -g 2200 lab",
        "useradd -m -u 2102 -g 2200 -s /bin/bash bob",
        f"mount -t nfs4 -o port=2049,hard 10.42.3.1:/gpucluster-x {boot.shared}",
    ]
    assert boot.calls[-2:] == ["systemctl enable slurmd", "systemctl restart slurmd"]
    assert not any(c.startswith("scontrol") for c in boot.calls), boot.calls
    assert boot.file("/etc/munge/munge.key") == "k"


def test_shared_dir_and_its_parents_are_open_to_every_user_after_the_key_s_umask(tmp_path):
    """The boot writes the munge key under `umask 077`; shared_dir and the parents it makes
    must still let every user's job through (a job of bstuser on a burst node could not open
    its output file in shared_dir: the e2e test, tests/burst/test_e2e_burst.py)."""
    boot = Boot(tmp_path, (), "10.42.3.1:2049:/x")
    assert boot.done.returncode == 0, boot.log
    assert oct(boot.root.joinpath("etc/munge/munge.key").stat().st_mode & 0o777) == "0o400"
    shared = boot.shared
    modes = {str(d.relative_to(tmp_path)): oct(d.stat().st_mode & 0o777) for d in (shared, *shared.parents[:3])}
    assert modes == {
        "srv/gpucluster/x/shared": "0o755", "srv/gpucluster/x": "0o755", "srv/gpucluster": "0o755", "srv": "0o755"
    }, modes  # fmt: skip


# ---- P3: a person the image has, and any failed boot, reported to Slurm ----


@pytest.mark.parametrize(
    ("person", "problem"),
    [
        ("alice:1000:1000:alice", "uid 1000 belongs to admin, users[] gives it to alice"),
        ("admin:2000:2000:admin", "user admin exists with uid:gid 1000:1000, users[] says 2000:2000"),
    ],
)
def test_a_person_the_image_has_stops_the_boot_before_any_change_and_slurm_is_told(tmp_path, person, problem):
    """Debian's AMI gives uid and gid 1000 to `admin`: the boot refuses users[] that clash,
    makes nobody, never starts slurmd, and sets the node DOWN with the reason."""
    boot = Boot(tmp_path, [person], accounts=DEBIAN_AMI_ACCOUNTS)
    assert boot.done.returncode != 0, boot.log
    assert not any(c.split()[0] in ("groupadd", "useradd") for c in boot.calls), boot.calls
    assert "systemctl restart slurmd" not in boot.calls
    (report,) = [c for c in boot.calls if c.startswith("scontrol")]
    assert report.startswith("scontrol update nodename=burst-1 state=down reason=burst boot: users[] clash"), report
    assert problem in report and report.endswith("(SLURM_CONF_SERVER=10.42.3.2:6817)"), report
    assert problem in boot.log and "gpucluster: burst boot: users[] clash" in boot.file("/dev/console")


def test_a_mount_that_never_succeeds_is_reported_to_slurm(tmp_path):
    boot = Boot(tmp_path, PEOPLE, "10.42.3.1:2049:/gpucluster-x", MOUNT_FAILS="1")
    assert boot.done.returncode != 0, boot.log
    assert sum(c.startswith("mount ") for c in boot.calls) == 30
    assert "systemctl restart slurmd" not in boot.calls
    (report,) = [c for c in boot.calls if c.startswith("scontrol")]
    assert "state=down reason=burst boot: the mount of 10.42.3.1:/gpucluster-x at shared_dir" in report, report


def test_a_failure_before_munge_runs_is_logged_and_on_the_console_only(tmp_path):
    """Without munged nothing can sign a request to slurmctld: ResumeTimeout ends that node."""
    boot = Boot(tmp_path, PEOPLE, KEY_FAILS="1")
    assert boot.done.returncode != 0, boot.log
    assert not any(c.startswith("scontrol") for c in boot.calls), boot.calls
    assert "burst boot: the munge key from Secrets Manager (exit 1)" in boot.file("/dev/console")
    assert "munge is not running: slurmctld cannot be told" in boot.log


def test_the_boot_fits_in_ec2_user_data_with_the_node_s_name():
    people = [f"user{i:03}:{3000 + i}:{3000 + i}:user{i:03}" for i in range(100)]
    text = render_user_data("10.42.3.2", "us-east-1", SECRET, None, SOCKET, people, "/srv/shared", "10.42.3.1:2049:/x")
    assert len(for_node(text, "burst-partition-name-99").encode()) <= 16384
    assert text.count("users_check() {") == 1 and text.count("user_add() {") == 1
    assert "#@LIB" not in text


# ---- P5: shared_dir mounted at every boot, and slurmd only with it ----

FSTAB_GENERATOR = "/lib/systemd/system-generators/systemd-fstab-generator"


def test_after_a_reboot_systemd_mounts_shared_dir_and_slurmd_requires_it(tmp_path):
    """User data runs at the first boot only: the boot leaves an fstab line (systemd's mount at
    every boot) and slurmd's drop-in `RequiresMountsFor=shared_dir`."""
    boot = Boot(tmp_path, PEOPLE, "10.42.3.1:2049:/gpucluster-x")
    assert boot.done.returncode == 0, boot.log
    fstab = boot.file("/etc/fstab").splitlines()
    assert fstab == ["# the image's", f"10.42.3.1:/gpucluster-x {boot.shared} nfs4 port=2049,hard,_netdev 0 0"]
    drop_in = boot.file("/etc/systemd/system/slurmd.service.d/gpucluster-shared-dir.conf")
    assert drop_in == f"[Unit]\nRequiresMountsFor={boot.shared}\n"
    # systemd reads the mount as the fstab unit's (mounted) when slurmd starts and requires it.
    assert boot.calls.index("systemctl daemon-reload", boot.calls.index(next(c for c in boot.calls if "mount -t" in c)))
    if not os.path.exists(FSTAB_GENERATOR):
        pytest.skip("no systemd-fstab-generator here")
    out = tmp_path / "generated"
    out.mkdir()
    generator_env = {"SYSTEMD_FSTAB": str(boot.root / "etc/fstab"), "SYSTEMD_PROC_CMDLINE": "", "PATH": "/usr/bin:/bin"}
    subprocess.run([FSTAB_GENERATOR, out, out, out], env=generator_env, check=True, capture_output=True, timeout=30)
    unit_name = subprocess.run(
        ["systemd-escape", "--path", "--suffix=mount", str(boot.shared)], capture_output=True, text=True, check=True
    ).stdout.strip()
    unit = (out / unit_name).read_text()
    assert f"Where={boot.shared}\n" in unit and "Type=nfs4\n" in unit and "What=10.42.3.1:/gpucluster-x\n" in unit
    assert (out / "remote-fs.target.requires" / unit_name).exists()


def test_without_a_shared_filesystem_slurmd_requires_no_mount(tmp_path):
    boot = Boot(tmp_path, PEOPLE)
    assert boot.done.returncode == 0, boot.log
    assert boot.file("/etc/fstab") == "# the image's\n"
    assert not (boot.root / "etc/systemd/system/slurmd.service.d/gpucluster-shared-dir.conf").exists()
