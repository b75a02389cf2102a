"""An EC2 host's real first boot, stood in by a container: the node image's packages plus
cloud-init and sshd, the program's user data given through cloud-init's NoCloud seed (as EC2's
datasource would give it), a loop device as its state volume (at /dev/xvdf, the name a
non-NVMe instance gives it) and LXC's console log as its console. cloud-init runs it at boot:
the volume is formatted (blank) and mounted over the state directories, and the host key the
instance made is printed to the console. The program's console reader (with an `aws` that
prints that log) gives the key to pin; then the engine harness connects over SSH with the
stack's login key and that key, and runs that host's commands as far as this machine allows:
the SSH bootstrap (wait for SSH, the AcceptEnv drop-in), the stand-in GPUs and the host
preflight. A second boot finds the filesystem and mounts it again, unformatted.

It stops there: the next commands install LXC in the "instance" and start node containers
inside it, and LXC inside an LXC container fails at cgroup setup on this machine (cgroup v1,
PID 1 not systemd). A broken user data fails this test: cloud-init's status is then not
"done", or sshd does not present the pinned key, or the parameters are dropped (AcceptEnv).
"""

import copy
import json
import os
import shutil
import time
from dataclasses import replace
from pathlib import Path

import pytest

from components.lxc.node_image import IMAGE_PACKAGES
from tests.harness.command_executor import State, destroy_state, host_commands, unwrap, up
from tests.harness.program_harness import run_program, stack_config
from tests.test_e2e import host_snapshot, require_host, sh

pytestmark = pytest.mark.e2e
CONTAINER = "ec2boot-cloud1"
BRIDGE, GATEWAY, ADDRESS = "ec2bootbr0", "10.64.0.1", "10.64.0.2"
PACKAGES = [*IMAGE_PACKAGES, "cloud-init", "openssh-server", "e2fsprogs"]
DOWNLOAD_CACHE = Path("/var/cache/lxc/debian")
VOLUME_IMAGE = Path("/var/tmp/ec2boot-state.img")
STATE_DIRS = ("/var/lib/gpucluster", "/var/lib/lxc", "/srv/gpucluster/cloud/shared")
RUN_THESE = ("cloud-cloud1-ssh-ready", "cloud-cloud1-scripts-dir", "cloud-cloud1-sshd-accept-env",
             "cloud-cloud1-host-stand-in-gpus", "cloud-cloud1-host-size",
             "cloud-cloud1-host-preflight")  # fmt: skip


def remove_stand_in_instance() -> None:
    sh("lxc-stop", "-n", CONTAINER, "-k", check=False)
    sh("lxc-destroy", "-n", CONTAINER, "-f", check=False)
    sh("ip", "link", "del", BRIDGE, check=False)
    for line in sh("losetup", "-j", str(VOLUME_IMAGE), check=False).stdout.splitlines():
        sh("losetup", "-d", line.split(":", 1)[0], check=False)
    VOLUME_IMAGE.unlink(missing_ok=True)
    # LXC leaves an empty lxc.pivot cgroup behind on cgroup v1 hosts (as image_delete.sh knows).
    for pivot in Path("/sys/fs/cgroup").glob("*/lxc.pivot"):
        sh("rmdir", str(pivot), check=False)


def boot_config(login_public_key: str) -> dict:
    """The example EC2 stack, its login key the test's, cloud1 with a stand-in GPU (the stand-in
    instance has none) and no web app."""
    config = copy.deepcopy(stack_config("ec2"))
    cluster = config["cluster"]
    cluster["aws"]["ssh_public_key"] = login_public_key
    for host in cluster["hosts"]:
        host["gpu"] = {"stand_in": {"count": 1}}
    cluster.pop("web_app")
    return config


def test_first_boot_by_user_data_then_the_hosts_commands_over_pinned_ssh(tmp_path, capsys):
    require_host()
    remove_stand_in_instance()
    before = host_snapshot()
    # lxc-create fills LXC's download cache when it is empty: then it is removed at the end.
    cache_was_there = DOWNLOAD_CACHE.exists()
    sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "ops@site", "-f", str(tmp_path / "login"))
    login_public = (tmp_path / "login.pub").read_text().strip()
    run = run_program(boot_config(login_public), stack="ec2", secrets={"awsSshKey": (tmp_path / "login").read_text()})
    user_data = unwrap(run.by_name("cloud-cloud1-ec2-instance").inputs["userData"])
    reader = next(c for c in host_commands(run) if c.name == "cloud-cloud1-ec2-host-key")
    commands = [c for c in host_commands(run) if c.name in RUN_THESE]
    assert sorted(c.name for c in commands) == sorted(RUN_THESE)
    report, state = [], State()
    try:
        VOLUME_IMAGE.write_bytes(b"")
        os.truncate(VOLUME_IMAGE, 64 << 20)
        loop = sh("losetup", "-f", "--show", str(VOLUME_IMAGE)).stdout.strip()
        loop_number = os.stat(loop).st_rdev
        sh("ip", "link", "add", BRIDGE, "type", "bridge")
        sh("ip", "addr", "add", f"{GATEWAY}/24", "dev", BRIDGE)
        sh("ip", "link", "set", BRIDGE, "up")
        started = time.monotonic()
        sh("lxc-create", "-n", CONTAINER, "-t", "debian", "--", "-r", "bookworm", f"--packages={','.join(PACKAGES)}",
           timeout=900)  # fmt: skip
        built = time.monotonic() - started
        root = Path("/var/lib/lxc") / CONTAINER
        with (root / "config").open("a") as lxc_config:
            lxc_config.write(
                # An instance's root may raise kernel limits (the preflight checks it can): a
                # writable /proc/sys, which LXC's default mixed mount keeps read-only.
                "lxc.mount.auto =\nlxc.mount.auto = cgroup:mixed proc:rw sys:mixed\n"
                f"lxc.net.0.type = veth\nlxc.net.0.link = {BRIDGE}\nlxc.net.0.flags = up\n"
                f"lxc.net.0.ipv4.address = {ADDRESS}/24\nlxc.net.0.ipv4.gateway = {GATEWAY}\n"
                # The state volume as a non-NVMe instance sees it, and the console EC2 would keep.
                f"lxc.mount.entry = {loop} dev/xvdf none bind,create=file 0 0\n"
                f"lxc.cgroup.devices.allow = b {os.major(loop_number)}:{os.minor(loop_number)} rwm\n"
                f"lxc.console.logfile = {tmp_path / 'console.log'}\n"
            )
        seed = root / "rootfs/var/lib/cloud/seed/nocloud"
        seed.mkdir(parents=True)
        (seed / "user-data").write_text(user_data)
        (seed / "meta-data").write_text("instance-id: i-0stand1n\nlocal-hostname: cloud1\n")
        # LXC sets the address (as the node image does): ifupdown must not wait for DHCP on it.
        (root / "rootfs/etc/network/interfaces").write_text("auto lo\niface lo inet loopback\niface eth0 inet manual\n")
        # EC2's datasource gives the network; here LXC sets the address, and the seed is the datasource.
        (root / "rootfs/etc/cloud/cloud.cfg.d/90-stand-in.cfg").write_text(
            "datasource_list: [NoCloud]\nnetwork: {config: disabled}\n"
        )
        started = time.monotonic()
        sh("lxc-start", "-n", CONTAINER)
        waited = sh("lxc-attach", "-n", CONTAINER, "--", "cloud-init", "status", "--wait", "--long",
                    check=False, timeout=300)  # fmt: skip
        booted = time.monotonic() - started
        report.append(f"$ cloud-init status --long   (in the stand-in instance, {booted:.1f} s after lxc-start)\n"
                      + waited.stdout.strip().lstrip("."))  # fmt: skip
        assert waited.returncode == 0 and "status: done" in waited.stdout, waited.stdout + waited.stderr
        # The blank volume got a filesystem and is mounted over each state directory.
        assert sh("blkid", "-p", "-o", "value", "-s", "TYPE", loop).stdout.strip() == "ext4"
        for directory in STATE_DIRS:
            attached = sh("lxc-attach", "-n", CONTAINER, "--", "mountpoint", directory, check=False)
            assert attached.returncode == 0, f"{directory} is not on the state volume: {attached.stdout}"
        sh("lxc-attach", "-n", CONTAINER, "--", "sh", "-c", "echo kept > /srv/gpucluster/cloud/shared/marker")
        # The key to pin: what the instance printed to its console, read as the program reads it.
        fake_aws = tmp_path / "aws"
        fake_aws.write_text(f"#!/bin/sh\ncat {tmp_path / 'console.log'}\n")
        fake_aws.chmod(0o755)
        read = sh("/bin/bash", "-c", reader.create, env={**reader.environment, "INSTANCE_ID": "i-0stand1n",
                  "AWS_CLI": str(fake_aws), "CONSOLE_WAIT_S": "60", "CONSOLE_POLL_S": "2"})  # fmt: skip
        pinned = read.stdout.strip()
        host_key = sh("lxc-attach", "-n", CONTAINER, "--", "cat", "/etc/ssh/ssh_host_ed25519_key.pub").stdout
        assert pinned.startswith("ssh-ed25519 ") and " ".join(host_key.split()[:2]) == pinned, (pinned, host_key)
        assert sh("lxc-attach", "-n", CONTAINER, "--", "ls", "/etc/ssh/ssh_host_rsa_key", check=False).returncode != 0
        report.append(f"host key from the console: {pinned}")
        # The instance's public address, in the stand-in the container's on the test bridge.
        # The key pinned, and the reader (run above, as the engine would) no longer waited for.
        commands = [
            replace(c, connection={**c.connection, "host": ADDRESS, "hostKey": pinned},
                    dependencies=c.dependencies - {reader.urn})
            for c in commands
        ]  # fmt: skip

        timeline, actions = up(state, commands, timeout=180)
        assert set(actions.values()) == {"create"}
        facts = state.resources[next(c.urn for c in commands if c.name.endswith("preflight"))].stdout
        report.append(
            "over SSH (root, the stack's key, host key pinned): "
            + ", ".join(f"{s.name} {s.seconds:.1f} s" for s in sorted(timeline.steps, key=lambda s: s.started))
            + f"\npreflight facts: {facts.strip()}"
        )
        assert json.loads(facts.splitlines()[-1])["devices"] == ["/run/gpucluster-cloud-dev/nvidia0"], facts
        destroy_state(state)
        gone = sh("lxc-attach", "-n", CONTAINER, "--", "ls", "/etc/ssh/sshd_config.d/", check=False).stdout
        assert "gpucluster-cloud.conf" not in gone, "destroy left the drop-in"
        # A second boot (a stop and start): the filesystem is found, mounted again, not formatted.
        sh("lxc-stop", "-n", CONTAINER)
        sh("lxc-start", "-n", CONTAINER)
        again = sh("lxc-attach", "-n", CONTAINER, "--", "cloud-init", "status", "--wait", check=False, timeout=300)
        assert "status: done" in again.stdout, again.stdout + again.stderr
        kept = sh("lxc-attach", "-n", CONTAINER, "--", "cat", "/srv/gpucluster/cloud/shared/marker", check=False)
        assert kept.stdout == "kept\n", "the state volume lost its files at the second boot"
        report.append("second boot: the state volume mounted again, its files kept")
    finally:
        if state.resources:
            destroy_state(state)
        remove_stand_in_instance()
        if not cache_was_there:
            shutil.rmtree(DOWNLOAD_CACHE, ignore_errors=True)
            sh("rmdir", str(DOWNLOAD_CACHE.parent), check=False)
    assert host_snapshot() == before
    with capsys.disabled():
        print(f"\n== an EC2 host's first boot (stand-in: container {CONTAINER}, built in {built:.0f} s) ==")
        print("\n".join(report))
