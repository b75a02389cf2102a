"""The two scripts an EC2 host's life depends on, run here against stand-ins of the tools they
call: the state volume's mount at every boot (formats a blank volume, never an existing
filesystem) and the host key read from the instance's console."""

import os
import subprocess
from pathlib import Path

import pytest

from components.aws.user_data import FILES
from components.common.transport import script

MOUNT = "/var/lib/gpucluster-volume"
DIRECTORIES = ["/var/lib/gpucluster", "/var/lib/lxc", "/srv/gpucluster/cloud/shared"]


def stand_ins(bin_dir: Path, log: Path, blkid: str, mount_fails: bool = False) -> None:
    """blkid answering with `blkid` (shell text), mkfs and mount that log their calls, and a
    mountpoint that knows what mount mounted (`mount_fails`: the volume's mount does nothing)."""
    bin_dir.mkdir()
    mounted = bin_dir.parent / "mounted"
    record = "true" if mount_fails else f'for last; do :; done; echo "$last" >>{mounted}'
    tools = {
        "blkid": f'echo "blkid $*" >>{log}\n{blkid}',
        "mkfs.ext4": f'echo "mkfs.ext4 $*" >>{log}',
        "mount": f'echo "mount $*" >>{log}\n'
        + (f'[ "$1" = --bind ] && {{ for last; do :; done; echo "$last" >>{mounted}; exit 0; }}\n{record}'),
        "mountpoint": f'grep -qxF "$2" {mounted} 2>/dev/null',
        "mkdir": f'echo "mkdir $*" >>{log}',
    }
    for name, body in tools.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)


def mount_volume(tmp_path: Path, blkid: str, device_exists: bool = True, runs: int = 1, mount_fails: bool = False):
    log, fstab, device = tmp_path / "log", tmp_path / "fstab", tmp_path / "nvme1n1"
    if not (tmp_path / "bin").exists():
        stand_ins(tmp_path / "bin", log, blkid, mount_fails)
    if device_exists:
        device.write_text("")
    env = {**os.environ, "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}", "FSTAB": str(fstab), "WAIT_S": "1"}
    args = ["sh", str(FILES / "state_volume.sh"), MOUNT, f"{tmp_path}/absent {device}", *DIRECTORIES]
    for _ in range(runs):
        done = subprocess.run(args, capture_output=True, text=True, env=env, check=False, timeout=30)
    calls = log.read_text().splitlines() if log.exists() else []
    return done, calls, fstab.read_text().splitlines() if fstab.exists() else []


BLANK = 'case "$*" in *TYPE*) exit 2;; esac'
EXT4 = 'case "$*" in *TYPE*) echo ext4;; esac'


def test_a_blank_volume_is_formatted_then_mounted_and_bound_over_the_state_directories(tmp_path):
    done, calls, fstab = mount_volume(tmp_path, BLANK)
    assert done.returncode == 0, done.stderr
    device = str(tmp_path / "nvme1n1")
    assert f"mkfs.ext4 -q -L gpucluster-state {device}" in calls
    # Only the volume in fstab: a bind there would cover the empty directory when it is missing.
    assert fstab == [f"{device} {MOUNT} ext4 defaults,nofail 0 2"]
    mounts = [c for c in calls if c.startswith("mount ")]
    assert mounts == [f"mount -T {tmp_path / 'fstab'} {MOUNT}"] + [f"mount --bind {MOUNT}{d} {d}" for d in DIRECTORIES]


def test_an_existing_filesystem_is_mounted_never_formatted(tmp_path):
    done, calls, fstab = mount_volume(tmp_path, EXT4)
    assert done.returncode == 0, done.stderr
    assert not [c for c in calls if c.startswith("mkfs")]
    assert fstab[0] == f"{tmp_path / 'nvme1n1'} {MOUNT} ext4 defaults,nofail 0 2"


def test_every_boot_adds_nothing_twice(tmp_path):
    done, calls, fstab = mount_volume(tmp_path, EXT4, runs=3)
    assert done.returncode == 0, done.stderr
    assert len(fstab) == 1
    assert len([c for c in calls if c.startswith("mount ")]) == 1 + len(DIRECTORIES)  # mounted once


def test_no_bind_over_the_state_directories_without_the_volume(tmp_path):
    done, calls, _ = mount_volume(tmp_path, EXT4, mount_fails=True)
    assert done.returncode == 1 and "the state volume is not mounted" in done.stderr, done.stderr
    assert not [c for c in calls if "--bind" in c]


@pytest.mark.parametrize(
    ("blkid", "why"),
    [
        ('case "$*" in *TYPE*) exit 4;; esac', "blkid failed (4)"),  # an error is not "blank"
        ('case "$*" in *TYPE*) exit 1;; esac', "blkid failed (1)"),
        ('case "$*" in *TYPE*) echo xfs;; esac', "holds xfs, not ext4: left alone"),
    ],
)
def test_anything_but_a_blank_volume_or_ext4_stops_without_formatting(tmp_path, blkid, why):
    done, calls, fstab = mount_volume(tmp_path, blkid)
    assert done.returncode == 1 and why in done.stderr, done.stderr
    assert not [c for c in calls if c.startswith(("mkfs", "mount"))] and fstab == []


def test_a_volume_never_attached_fails_the_boot_command(tmp_path):
    done, calls, _ = mount_volume(tmp_path, BLANK, device_exists=False)
    assert done.returncode == 1 and "was not attached" in done.stderr
    assert not [c for c in calls if c.startswith(("blkid", "mkfs", "mount"))]


# ---- the host key from the console ----

ED25519 = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIPYlNyoaydYoKMRgJ+WsOYtSmoIUfz4I73ETeuj1Ak95"
CONSOLE = (
    "[    3.1] cloud-init[512]: Cloud-init v. 22.4.2 running 'modules:final'\r\n"
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIForgedBeforeTheBlock root@x\r\n"
    "-----BEGIN SSH HOST KEY KEYS-----\r\n"
    "ecdsa-sha2-nistp256 AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTY= root@cloud1\r\n"
    f"{ED25519} root@cloud1\r\n"
    "-----END SSH HOST KEY KEYS-----\r\n"
)


def read_host_key(tmp_path: Path, answers: list[str], wait_s: int = 5):
    """Run the host key reader (helpers included, as the program runs it) with an `aws` that
    prints answers[i] at its i-th call (the last one after that)."""
    for i, answer in enumerate(answers):
        (tmp_path / f"answer{i}").write_text(answer)
    fake = tmp_path / "aws"
    fake.write_text(
        "#!/bin/sh\n"
        f'echo "$*" >>{tmp_path}/args\n'
        f"n=$(wc -l <{tmp_path}/args); i=$((n - 1)); [ $i -lt {len(answers)} ] || i={len(answers) - 1}\n"
        f"cat {tmp_path}/answer$i\n"
    )
    fake.chmod(0o755)
    env = {**os.environ, "AWS_CLI": str(fake), "REGION": "us-east-1", "INSTANCE_ID": "i-0123456789abcdef0",
           "KEY_TYPE": "ssh-ed25519", "CONSOLE_WAIT_S": str(wait_s), "CONSOLE_POLL_S": "0"}  # fmt: skip
    done = subprocess.run(
        ["/bin/bash", "-c", script(FILES / "host_key_from_console.sh")],
        capture_output=True, text=True, env=env, check=False, timeout=60,
    )  # fmt: skip
    return done, (tmp_path / "args").read_text().splitlines()


def test_the_host_key_is_the_one_in_cloud_inits_block_on_the_console(tmp_path):
    done, calls = read_host_key(tmp_path, ["", "[    1.0] booting\n", CONSOLE])
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"{ED25519}\n"  # not the line outside the block, no comment, no \r
    assert len(calls) == 3  # polled until cloud-init printed it
    assert calls[0].split() == ["ec2", "get-console-output", "--region", "us-east-1", "--instance-id",
                                "i-0123456789abcdef0", "--latest", "--output", "text", "--query", "Output"]  # fmt: skip


def test_no_key_on_the_console_fails_at_the_deadline(tmp_path):
    block_without_ed25519 = "\n".join(line for line in CONSOLE.splitlines() if not line.startswith(ED25519))
    done, _ = read_host_key(tmp_path, [block_without_ed25519], wait_s=1)
    assert done.returncode == 1 and "no ssh-ed25519 host key on the console of i-0123456789abcdef0" in done.stderr
    assert done.stdout == ""
