"""End-to-end: a burst partition with real Slurm on this machine, EC2 played by moto.

The cluster `bst` (one local node, slurmctld on the host) is brought up through the harness
with a burst partition whose API endpoint is moto, served on the burst bridge's gateway. The
test plays the engine's AWS part: it makes in moto what the program declares (the subnet, the
launch templates as recorded under mocks, the munge key's secret, the controller's key) and
hands the real ids and key to the programs' install, as `pulumi up` would. slurmctld then runs
the installed resume, suspend and fail programs unchanged, and the reconciler's unit runs as
its timer runs it.

EC2's data plane is stood in by `DataPlane`: for each running instance of the cluster in moto
it boots an overlay clone of the node image with the instance's private address on the burst
bridge (routed to the controller, no NAT) and the instance's own user data in a NoCloud seed;
for each terminated one it removes the container. What the burst AMI carries and the node
image lacks is given by the stand-in: a unit that runs the seed's user data at boot (as
cloud-init runs a script user data; cloud-init itself is tested in tests/aws/test_e2e_ec2_boot.py),
boto3 (this venv's, bound read-only), the instance role's credentials (a file: moto checks
none), a stand-in GPU at /dev/nvidia0, `slurmd -b` (a container shares the host's boot
time, which slurmctld takes for a node that never rebooted and ignores while it powers up),
and an NFS client, which this machine's kernel lacks: Debian's libnfs13, python3-fusepy and
libfuse2 installed into the AMI, the project's user-space client
(components/sharedfs/files/nfs_stand_in_client.py) copied in, /dev/fuse bound in, and a
`mount` in /usr/local/sbin that runs that client (a transient unit of its own, as the kernel's
mount outlives the boot's unit) for the boot's `mount -t nfs4 -o port=P,... SERVER:EXPORT DIR`
and hands every other mount to /usr/bin/mount.

The cluster has the shared filesystem a one-host cluster with a burst partition has: served
by the host (NFS-Ganesha at its NAT bridge address) and mounted by the host (the stand-in
client: `client: stand_in`) and by each burst node at shared_dir.

Capacity errors are injected into moto's CreateFleet in this process (moto never runs out).
"""

import base64
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path

import boto3
import pytest
import requests
from moto.server import ThreadedMotoServer

from components.burst.cloud import template_name
from components.sharedfs.shared_fs import CLIENT_PROGRAM
from tests.burst.moto_ec2 import _template_data, no_capacity_for
from tests.harness.command_executor import apply, destroy, host_commands
from tests.harness.program_harness import run_program, stack_config
from tests.harness.slurm_client import as_person, cluster_slurm
from tests.test_e2e import leftovers, require_host, sh

pytestmark = pytest.mark.e2e

CLUSTER = "bst"
SLURM = cluster_slurm(f"/var/lib/gpucluster/{CLUSTER}")
# The burst "VPC" on this machine: a bridge holding the subnet's gateway (AWS's .1) and this
# host's end of the link to the VPN router the config names (the host routes the VPC there;
# the subnet's own route on the bridge is the more specific one).
BRIDGE = "bstbr9"
VPC, SUBNET, GATEWAY = "10.54.0.0/16", "10.54.1.0/24", "10.54.1.1"
ROUTER_LINK, ROUTER = "10.55.0.1/30", "10.55.0.2"
REGION = "us-east-1"
TYPES = ("g5.xlarge", "g4dn.xlarge")
SUSPEND_TIME_S, RESUME_TIMEOUT_S = 10, 60
GPU_DIR = Path(f"/run/gpucluster-{CLUSTER}-burst-dev")
BOTO_SITE = Path(boto3.__file__).parents[1]
LOG_PATH = f"/var/log/gpucluster-burst/{CLUSTER}.log"  # in slurmctld's container (placement host)
CONTROLLER = f"{CLUSTER}-slurmctld"


def in_controller(path: str) -> Path:
    """A file of slurmctld's own container (the burst programs run there), seen from the host."""
    pid = subprocess.run(["lxc-info", "-n", CONTROLLER, "-p", "-H"], capture_output=True, text=True).stdout.strip()
    return Path(f"/proc/{pid or 'none'}/root{path}")


def burst_log() -> str:
    """The burst programs' log in slurmctld's container ("" before they first wrote it)."""
    log = in_controller(LOG_PATH)
    return log.read_text() if log.exists() else ""


RECONCILER = f"gpucluster-burst-{CLUSTER}-reconcile.service"
AMI = f"{CLUSTER}-ami"  # the burst AMI's stand-in: a copy of the node image, instances its clones
SHARED_DIR = f"/srv/gpucluster/{CLUSTER}/shared"
EXPORT_DIR = f"/srv/gpucluster/{CLUSTER}/export"  # the served files, on the host; destroy keeps them
BURST_TAG = "gpucluster:burst"
IPTABLES_DEBS = ("iptables", "libip4tc2", "libip6tc2", "libxtables12", "libnftnl11", "libnetfilter-conntrack3",
                 "libnfnetlink0")  # fmt: skip
NFS_CLIENT_DEBS = ("libnfs13", "python3-fusepy", "libfuse2")  # the stand-in client's (CLIENT_PACKAGES["stand_in"])
CLIENT_IN_AMI = "/usr/local/lib/gpucluster-nfs/nfs_stand_in_client.py"
# The AMI's `mount` for NFSv4 (the boot's only one): the stand-in client in a unit of its own,
# until DIR is a mountpoint; anything else goes to the real mount.
MOUNT_WRAPPER = f"""#!/bin/sh
# The burst AMI stand-in's NFS client (tests/burst/test_e2e_burst.py): this machine's kernel has none.
if [ "$#" = 6 ] && [ "$1" = -t ] && [ "$2" = nfs4 ] && [ "$3" = -o ]; then
  port=$(printf '%s\\n' "$4" | tr , '\\n' | sed -n 's/^port=//p')
  server=${{5%%:*}} export=${{5#*:}} dir=$6
  systemd-run --quiet --collect --unit=standin-nfs-client \\
    -p StandardOutput=append:/var/log/standin-nfs-client.log -p StandardError=append:/var/log/standin-nfs-client.log \\
    /usr/bin/python3 {CLIENT_IN_AMI} "$server" "${{port:-2049}}" "$export" "$dir" || exit 32
  for _ in $(seq 100); do
    mountpoint -q "$dir" && exit 0
    sleep 0.1
  done
  echo "the stand-in NFS client did not mount $dir (/var/log/standin-nfs-client.log)" >&2
  exit 32
fi
exec /usr/bin/mount "$@"
"""
KEYS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}


def burst_config(endpoint: str) -> dict:
    config = stack_config("e2e")
    cluster = config["cluster"]
    cluster["name"] = CLUSTER
    cluster["host"]["shared_dir"] = SHARED_DIR
    cluster["network"] = {
        "nat_bridge": {"name": f"{CLUSTER}br0", "address": "10.53.3.1/24"},
        "cluster_bridge": {"name": f"{CLUSTER}br1", "subnet": "10.53.5.0/24"},
    }
    cluster["gpu"] = {"stand_in": {"count": 1}}
    cluster["nodes"] = [{"name": "c000", "nat_address": "10.53.3.2", "cluster_address": "10.53.5.1"}]
    cluster["slurm"] = {"controller": {"placement": "host"}, "partitions": [{"name": "local", "default": True}]}
    cluster.pop("web_app")
    cluster["users"] = [{"name": "bstuser", "uid": 2391, "gid": 2391}]  # N4: made on burst nodes too
    # N4: shared_dir on the burst nodes too: the host serves it at its NAT bridge address (in
    # on_premises_cidrs); the host mounts it with the stand-in client (no kernel NFS client here).
    cluster["shared_fs"] = {"kind": "served", "directory": EXPORT_DIR, "client": "stand_in"}
    cluster["burst"] = {
        "region": REGION,
        "ami": "ami-0a1b2c3d4e5f67890",
        "vpc_cidr": VPC,
        "subnets": [{"cidr": SUBNET, "availability_zone": "us-east-1a"}],
        "on_premises_cidrs": ["10.53.0.0/16"],
        "vpn": {"customer_gateway_address": "198.51.100.7", "router_address": ROUTER},
        "api_endpoint": endpoint,
        "partitions": [
            {
                "name": "burst",
                "instance_types": [{"name": t, "gpus": 1} for t in TYPES],
                "max_nodes": 2,
                "cpus": 1,
                "suspend_time_s": SUSPEND_TIME_S,
                "resume_timeout_s": RESUME_TIMEOUT_S,
            }
        ],
        "capacity_skip_s": 30,
        "orphan_grace_s": 30,
    }
    return config


def make_aws(ec2, run, commands):
    """What `pulumi up` makes in AWS, made in moto; the install gets the real ids and key."""
    vpc = ec2.create_vpc(CidrBlock=VPC)["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock=SUBNET, AvailabilityZone="us-east-1a")["Subnet"]["SubnetId"]
    group = ec2.create_security_group(GroupName="burst", Description="burst", VpcId=vpc)["GroupId"]
    endpoint = ec2.meta.endpoint_url
    iam = boto3.client("iam", region_name=REGION, endpoint_url=endpoint)
    profile = iam.create_instance_profile(InstanceProfileName=f"{CLUSTER}-burst-node")["InstanceProfile"]["Arn"]
    for inputs in (r.inputs for r in run.of_type("aws:ec2/launchTemplate:LaunchTemplate")):
        ec2.create_launch_template(
            LaunchTemplateName=inputs["name"], LaunchTemplateData=_template_data(inputs, group, profile)
        )
    iam.create_user(UserName=f"{CLUSTER}-burst-controller")
    key = iam.create_access_key(UserName=f"{CLUSTER}-burst-controller")["AccessKey"]
    install = next(c for c in commands if c.name == f"{CLUSTER}-burst-programs-install")
    secrets = boto3.client("secretsmanager", region_name=REGION, endpoint_url=endpoint)
    secrets.create_secret(Name=install.environment["SECRET_ID"])
    settings = json.loads(install.environment["CONFIG_JSON"])
    settings["subnets"] = [subnet]
    credentials = {"aws_access_key_id": key["AccessKeyId"], "aws_secret_access_key": key["SecretAccessKey"]}
    installed = replace(
        install,
        environment={**install.environment, "CONFIG_JSON": json.dumps(settings, sort_keys=True)},
        stdin=json.dumps(credentials),
    )
    return [installed if c is install else c for c in commands]


class DataPlane(threading.Thread):
    """EC2's data plane: a container per running instance of the cluster, gone when it ends."""

    def __init__(self, ec2):
        super().__init__(daemon=True)
        self.ec2 = ec2
        self.stopping = threading.Event()
        self.never_boot: set[str] = set()  # nodes whose instances never come up
        self.booted: dict[str, float] = {}  # container -> seconds from seen to lxc-start done
        self.events: list[str] = []
        self.error: BaseException | None = None

    def run(self):
        while not self.stopping.is_set():
            try:
                self.step()
            except Exception as error:  # noqa: BLE001 (reported by the test, not lost in the thread)
                self.error = error
                return
            self.stopping.wait(1)

    def instances(self) -> list[dict]:
        """The cluster's burst instances (an EC2 host of the cluster, tagged like one, is no node)."""
        filters = [{"Name": "tag:gpucluster:cluster", "Values": [CLUSTER]}, {"Name": "tag-key", "Values": [BURST_TAG]}]
        pages = self.ec2.describe_instances(Filters=filters)
        return [i for r in pages["Reservations"] for i in r["Instances"]]

    def step(self):
        for instance in self.instances():
            name = container_of(instance["InstanceId"])
            state = instance["State"]["Name"]
            exists = Path(f"/var/lib/lxc/{name}").exists()
            node = next((t["Value"] for t in instance.get("Tags", []) if t["Key"] == "gpucluster:node"), "")
            if state == "running" and not exists and node not in self.never_boot:
                self.boot(instance, name, node)
            elif state in ("shutting-down", "terminated") and exists:
                remove_container(name)
                self.events.append(f"{time.strftime('%H:%M:%S')} {instance['InstanceId']} {state}: {name} removed")

    def boot(self, instance: dict, name: str, node: str):
        started = time.monotonic()
        iid = instance["InstanceId"]
        encoded = self.ec2.describe_instance_attribute(InstanceId=iid, Attribute="userData")["UserData"]["Value"]
        sh("lxc-copy", "-n", AMI, "-N", name, "-s", "-B", "overlay")
        with Path(f"/var/lib/lxc/{name}/config").open("a") as config:
            config.write(
                "lxc.net =\nlxc.net.0.type = veth\n"
                f"lxc.net.0.link = {BRIDGE}\nlxc.net.0.name = eth0\nlxc.net.0.flags = up\n"
                f"lxc.net.0.ipv4.address = {instance['PrivateIpAddress']}/24\nlxc.net.0.ipv4.gateway = {GATEWAY}\n"
            )
        # The NoCloud seed: the instance's own user data, and its meta-data.
        rootfs = next(line for line in Path(f"/var/lib/lxc/{name}/config").read_text().splitlines()
                      if line.startswith("lxc.rootfs.path"))  # fmt: skip
        seed = Path(rootfs.rsplit(":", 1)[1].strip()) / "var/lib/cloud/seed/nocloud"  # the overlay's upper dir
        seed.mkdir(parents=True)
        (seed / "user-data").write_text(base64.b64decode(encoded).decode())
        (seed / "meta-data").write_text(f"instance-id: {iid}\nlocal-hostname: {node}\n")
        sh("lxc-start", "-n", name)
        self.booted[name] = time.monotonic() - started
        what = f"{node}, {instance['InstanceType']}, {instance['PrivateIpAddress']}"
        self.events.append(f"{time.strftime('%H:%M:%S')} {iid} running: {name} booted ({what})")


def make_ami() -> None:
    """The node image copied (not cloned: the cluster's destroy refuses to remove an image that
    still has clones), with what the burst AMI carries and the node image lacks."""
    image, ami = Path(f"/var/lib/lxc/{CLUSTER}-image"), Path(f"/var/lib/lxc/{AMI}")
    ami.mkdir()
    sh("cp", "-a", str(image / "rootfs"), str(ami / "rootfs"), timeout=300)
    (ami / "config").write_text((image / "config").read_text().replace(str(image), str(ami)))
    gpu = os.stat(GPU_DIR / "nvidia0").st_rdev
    with (ami / "config").open("a") as config:
        config.write(
            # The instance's GPU (a stand-in device), and the AMI's boto3 (this venv's, read-only).
            f"lxc.mount.entry = {GPU_DIR / 'nvidia0'} dev/nvidia0 none bind,create=file 0 0\n"
            f"lxc.cgroup.devices.allow = c {os.major(gpu)}:{os.minor(gpu)} rwm\n"
            f"lxc.cgroup2.devices.allow = c {os.major(gpu)}:{os.minor(gpu)} rwm\n"
            f"lxc.mount.entry = {BOTO_SITE} usr/local/lib/gpucluster-aws-sdk none bind,ro,create=dir 0 0\n"
            # FUSE, for the stand-in NFS client (a kernel NFS client needs no device).
            "lxc.mount.entry = /dev/fuse dev/fuse none bind,create=file 0 0\n"
            "lxc.cgroup.devices.allow = c 10:229 rwm\n"
            "lxc.cgroup2.devices.allow = c 10:229 rwm\n"
        )
    root = ami / "rootfs"
    files = {
        # What runs a script user data once at first boot (cloud-init's scripts-user).
        "etc/systemd/system/standin-user-data.service": (
            "[Unit]\nAfter=network.target\nConditionPathExists=/var/lib/cloud/seed/nocloud/user-data\n"
            "[Service]\nType=oneshot\n"
            "ExecStart=/bin/sh -c 'install -m 0700 /var/lib/cloud/seed/nocloud/user-data /run/user-data"
            " && exec /run/user-data'\n"
        ),
        "usr/local/lib/python3.11/dist-packages/gpucluster-aws-sdk.pth": "/usr/local/lib/gpucluster-aws-sdk\n",
        # The instance role's credentials (from IMDS on EC2; moto checks none).
        "root/.aws/credentials": "[default]\naws_access_key_id = testing\naws_secret_access_key = testing\n",
        # A fresh VM's boot time: slurmd reports a reboot when it starts (a container otherwise
        # reports the host's boot, earlier than the power up, and slurmctld ignores it).
        "etc/systemd/system/slurmd.service.d/standin-boot-time.conf": (
            "[Service]\nExecStart=\nExecStart=/usr/sbin/slurmd -D -s -b $SLURMD_OPTIONS\n"
        ),
        # The NFS client (a real AMI's nfs-common and kernel): the project's stand-in client.
        CLIENT_IN_AMI.lstrip("/"): CLIENT_PROGRAM.read_text(),
        "usr/local/sbin/mount": MOUNT_WRAPPER,
    }
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    (root / "usr/local/sbin/mount").chmod(0o755)
    # The AMI's iptables (docs/burst.md "The image"): the boot's IMDS rule needs it; and the
    # stand-in NFS client's libraries.
    debs = Path(tempfile.mkdtemp(prefix="bst-ami-debs-"))
    try:
        download = ["apt-get", "download", *IPTABLES_DEBS, *NFS_CLIENT_DEBS]
        subprocess.run(download, cwd=debs, capture_output=True, check=True, timeout=120)
        sh("dpkg", f"--root={root}", "--force-depends", "-i", *sorted(str(d) for d in debs.glob("*.deb")), timeout=120)
        sh("chroot", str(root), "ldconfig")  # fusepy finds libfuse through the cache
    finally:
        shutil.rmtree(debs, ignore_errors=True)
    wants = root / "etc/systemd/system/multi-user.target.wants"
    wants.mkdir(parents=True, exist_ok=True)
    (wants / "standin-user-data.service").symlink_to("/etc/systemd/system/standin-user-data.service")


def container_of(instance_id: str) -> str:
    return f"{CLUSTER}-{instance_id}"


def remove_container(name: str) -> None:
    sh("lxc-stop", "-n", name, "-k", check=False)
    sh("lxc-destroy", "-n", name, "-f", check=False)


def remove_burst_host_parts() -> None:
    for directory in Path("/var/lib/lxc").glob(f"{CLUSTER}-i-*"):
        remove_container(directory.name)
    shutil.rmtree(f"/var/lib/lxc/{AMI}", ignore_errors=True)
    sh("ip", "link", "del", BRIDGE, check=False)
    shutil.rmtree(GPU_DIR, ignore_errors=True)
    Path(LOG_PATH).unlink(missing_ok=True)  # where an earlier release wrote it on the host


def remove_served_files() -> None:
    """The served files destroy keeps (docs/hosts.md: `rm -rf <directory>` after destroy)."""
    if not Path(SHARED_DIR).is_mount():  # never through a mount a cut-short run left
        shutil.rmtree(EXPORT_DIR, ignore_errors=True)
    for directory in (Path(SHARED_DIR).parent, Path(SHARED_DIR).parent.parent):
        sh("rmdir", str(directory), check=False)  # only when empty: /srv/gpucluster may be another's too


class World:
    def __init__(self, ec2, plane: DataPlane, commands, endpoint: str):
        self.ec2, self.plane, self.commands, self.endpoint = ec2, plane, commands, endpoint

    def live(self) -> list[dict]:
        return [i for i in self.plane.instances() if i["State"]["Name"] in ("pending", "running")]

    def containers(self) -> list[str]:
        return sorted(p.name for p in Path("/var/lib/lxc").glob(f"{CLUSTER}-i-*"))


@pytest.fixture(scope="module")
def world():
    require_host()
    for key, value in {**KEYS, "AWS_CLI": str(Path(sys.executable).with_name("aws"))}.items():
        os.environ.setdefault(key, value)  # the destroy hook's aws CLI, as a user runs pulumi
    remove_burst_host_parts()
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # moto's request lines
    server = ThreadedMotoServer(ip_address=GATEWAY, port=0)
    commands, plane = [], None
    try:
        sh("ip", "link", "add", BRIDGE, "type", "bridge")
        for address in (f"{GATEWAY}/24", ROUTER_LINK):
            sh("ip", "addr", "add", address, "dev", BRIDGE)
        sh("ip", "link", "set", BRIDGE, "up")
        GPU_DIR.mkdir(parents=True)
        sh("mknod", str(GPU_DIR / "nvidia0"), "c", "195", "200")
        server.start()
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        requests.post(f"{endpoint}/moto-api/reset", timeout=10)
        ec2 = boto3.client("ec2", region_name=REGION, endpoint_url=endpoint)
        run = run_program(burst_config(endpoint), stack=CLUSTER)
        commands = host_commands(run)
        destroy(commands)  # what a cut-short run left
        remove_served_files()
        commands = make_aws(ec2, run, commands)
        started = time.monotonic()
        apply(commands)
        up = time.monotonic() - started
        make_ami()
        print(f"\nbring-up of {CLUSTER} with its burst partition: {up:.1f} s; AMI stand-in made", flush=True)
        plane = DataPlane(ec2)
        plane.start()
        yield World(ec2, plane, commands, endpoint)
    finally:
        if plane is not None:
            plane.stopping.set()
            plane.join(30)
        try:
            if commands:
                destroy(commands)
        finally:
            remove_burst_host_parts()
            remove_served_files()
            if server._thread is not None:  # started
                server.stop()
    assert leftovers(CLUSTER) == []


def node_state(node: str) -> str:
    return sh("sinfo", "-h", "-N", "-n", node, "-o", "%t", env=SLURM).stdout.strip()


def job_field(job: str, field: str) -> str:
    text = sh("scontrol", "show", "job", "-o", job, env=SLURM, check=False).stdout
    return next((w.split("=", 1)[1] for w in text.split() if w.startswith(f"{field}=")), "")


def wait_for(what: str, condition, seconds: float, world: World) -> float:
    started = time.monotonic()
    while not condition():
        assert world.plane.error is None, f"data plane: {world.plane.error!r}"
        assert time.monotonic() - started < seconds, f"{what}: not within {seconds} s\n" + diagnostics(world)
        time.sleep(1)
    return time.monotonic() - started


def diagnostics(world: World) -> str:
    sinfo = sh("sinfo", "-N", "-o", "%N %t %E", env=SLURM, check=False).stdout
    squeue = sh("squeue", "-o", "%i %T %r %N", env=SLURM, check=False).stdout
    log = burst_log()[-3000:]
    ctld = in_controller("/var/log/slurm/slurmctld.log")
    ctld_tail = "\n".join(ctld.read_text().splitlines()[-40:]) if ctld.exists() else "(no slurmctld.log there)"
    inside = ""
    for name in world.containers():  # the stand-in instances' own logs, read from their overlay
        for log_file in (
            "var/log/gpucluster-burst-boot.log",
            "var/log/slurm/slurmd.log",
            "var/log/standin-nfs-client.log",
        ):
            path = Path(f"/var/lib/lxc/{name}/overlay/delta/{log_file}")
            tail = "\n".join(path.read_text(errors="replace").splitlines()[-15:]) if path.exists() else "(none)"
            inside += f"{name} /{log_file}:\n{tail}\n"
    return (
        f"$ sinfo\n{sinfo}$ squeue\n{squeue}burst log:\n{log}\ndata plane: {world.plane.events}\n{inside}"
        f"moto: {[(i['InstanceId'], i['State']['Name']) for i in world.plane.instances()]}\nslurmctld:\n{ctld_tail}"
    )


def sbatch(*args: str) -> str:
    out = sh("sbatch", "--parsable", "--chdir=/tmp", "-o", "/dev/null", *args, env=SLURM).stdout
    return out.strip().split(";")[0]


def transcript(lines: list[str], capsys, title: str) -> None:
    with capsys.disabled():
        print(f"\n== {title} ==\n" + "\n".join(lines))


def test_1_a_gpu_job_starts_a_burst_node_which_ends_after_suspend_time(world, capsys):
    report: list[str] = []
    assert node_state("burst-1") == "idle~", diagnostics(world)
    started = time.monotonic()
    job = sbatch("-p", "burst", "--gres=gpu:1", "--wrap", "hostname; ls -l /dev/nvidia0")
    report.append(f"$ sbatch -p burst --gres=gpu:1 --wrap 'hostname; ls -l /dev/nvidia0'  -> job {job}")
    wait_for("burst-1 powering up", lambda: node_state("burst-1") in ("alloc#", "mix#"), 30, world)
    report.append(f"burst-1: {node_state('burst-1')} after {time.monotonic() - started:.1f} s")
    wait_for("an instance in moto", lambda: world.live(), 30, world)
    (instance,) = world.live()
    report.append(f"moto: {instance['InstanceId']} {instance['InstanceType']} {instance['PrivateIpAddress']}")
    assert instance["InstanceType"] == TYPES[0]
    wait_for("the job running", lambda: job_field(job, "JobState") in ("RUNNING", "COMPLETED"), RESUME_TIMEOUT_S, world)
    to_start = time.monotonic() - started
    wait_for("the job done", lambda: job_field(job, "JobState") == "COMPLETED", 60, world)
    node = sh("scontrol", "show", "node", "burst-1", env=SLURM).stdout
    report.append(f"job {job} COMPLETED; submit-to-start {to_start:.1f} s")
    report.append("$ scontrol show node burst-1 (while up)\n" + node)
    assert f"NodeAddr={instance['PrivateIpAddress']}" in node, node  # cloud_reg_addrs: the address, unNATed
    wait_for("the instance ended", lambda: not world.live() and not world.containers(), SUSPEND_TIME_S + 90, world)
    wait_for("burst-1 back in the pool", lambda: node_state("burst-1") == "idle~", 60, world)
    report.append(f"after SuspendTime={SUSPEND_TIME_S}: no instance in moto, no container, burst-1 idle~ "
                  f"({time.monotonic() - started:.1f} s from submit)")  # fmt: skip
    report += world.plane.events
    report.append("burst log:\n" + burst_log())
    transcript(report, capsys, f"burst: submit-to-start {to_start:.1f} s")


def burst_nodes() -> dict[str, str]:
    lines = sh("sinfo", "-h", "-N", "-p", "burst", "-o", "%N %t", env=SLURM).stdout.split("\n")
    return dict(line.split() for line in lines if line.strip())


def run_reconciler() -> None:
    """The reconciler's unit, run as its timer runs it (this machine's init is not systemd)."""
    unit = dict(
        line.split("=", 1)
        for line in in_controller(f"/etc/systemd/system/{RECONCILER}").read_text().splitlines()
        if "=" in line
    )
    sh(
        "lxc-attach",
        "-n",
        CONTROLLER,
        "--",
        "runuser",
        "-u",
        unit["User"],
        "--",
        *unit["ExecStart"].split(),
        check=False,
    )


def back_in_the_pool(world: World, seconds: float = 120) -> float:
    """Every burst node idle~ again, no instance, no container: the reconciler's unit run as its
    timer runs it, each few seconds here instead of each minute."""

    def settled() -> bool:
        if set(burst_nodes().values()) == {"idle~"} and not world.live() and not world.containers():
            return True
        run_reconciler()
        return False

    return wait_for("the burst nodes back in the pool", settled, seconds, world)


def test_2_a_capacity_error_on_the_first_type_runs_the_job_on_the_second(world, capsys):
    report: list[str] = []
    started = time.monotonic()
    with no_capacity_for(TYPES[0]):
        job = sbatch("-p", "burst", "--gres=gpu:1", "--wrap", "hostname")
        report.append(f"({TYPES[0]} has no capacity) $ sbatch -p burst --gres=gpu:1 --wrap hostname  -> job {job}")
        wait_for("an instance in moto", lambda: world.live(), 40, world)
    (instance,) = world.live()
    report.append(f"moto: {instance['InstanceId']} {instance['InstanceType']} {instance['PrivateIpAddress']}")
    assert instance["InstanceType"] == TYPES[1]
    wait_for("the job done", lambda: job_field(job, "JobState") == "COMPLETED", RESUME_TIMEOUT_S + 30, world)
    report.append(f"job {job} COMPLETED on {job_field(job, 'NodeList')} ({TYPES[1]}) "
                  f"{time.monotonic() - started:.1f} s after submit")  # fmt: skip
    back_in_the_pool(world)
    log = burst_log()
    assert f"no capacity for {TYPES[0]}" in log, log
    report.append("burst log:\n" + "\n".join(line for line in log.splitlines() if "resume[" in line)[-1500:])
    transcript(report, capsys, "burst: capacity error on the first type")


def test_3_capacity_errors_on_every_type_leave_the_job_pending_with_a_reason(world, capsys):
    report: list[str] = []
    with no_capacity_for(*TYPES):
        job = sbatch("-p", "burst", "--gres=gpu:1", "--wrap", "hostname")
        report.append(f"(no type has capacity) $ sbatch -p burst --gres=gpu:1 --wrap hostname  -> job {job}")

        def refused() -> bool:
            reasons = sh("sinfo", "-h", "-R", "-p", "burst", "-o", "%n %E", env=SLURM).stdout
            return "InsufficientInstanceCapacity" in reasons and job_field(job, "JobState") == "PENDING"

        wait_for("the capacity error as a node's reason", refused, 60, world)
        time.sleep(5)
        reasons = sh("sinfo", "-R", "-p", "burst", "-o", "%n %t %E", env=SLURM).stdout
        pending = sh("squeue", "-j", job, "-o", "%i %T %r", env=SLURM).stdout
        report += [f"$ sinfo -R -p burst\n{reasons}", f"$ squeue -j {job}\n{pending}"]
        assert job_field(job, "JobState") == "PENDING", pending
        assert world.live() == [], world.live()
        assert "InsufficientInstanceCapacity" in reasons, reasons
    report.append(f"moto: no instance of {CLUSTER}")
    sh("scancel", job, env=SLURM)
    waited = back_in_the_pool(world, 120)
    report.append(f"job cancelled; the nodes back in the pool {waited:.1f} s later (the reconciler)")
    transcript(report, capsys, "burst: capacity errors on every type")


def ec2_host(world) -> str:
    """An instance tagged as components/aws makes the cluster's EC2 hosts: the cluster's tags,
    no burst tag, no node tag. Running, and older than the grace time by the end."""
    tags = {"Name": f"{CLUSTER}-gpu1", "gpucluster:cluster": CLUSTER, "gpucluster:site": "aws"}
    made = world.ec2.run_instances(
        ImageId="ami-0a1b2c3d4e5f67890",
        InstanceType="g5.xlarge",
        MinCount=1,
        MaxCount=1,
        TagSpecifications=[{"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}],
    )
    return made["Instances"][0]["InstanceId"]


def state_of(world, instance_id: str) -> str:
    reservations = world.ec2.describe_instances(InstanceIds=[instance_id])["Reservations"]
    return reservations[0]["Instances"][0]["State"]["Name"]


def test_5_an_orphan_instance_is_terminated_by_the_reconciler(world, capsys):
    report: list[str] = []
    template = template_name(CLUSTER, "burst", TYPES[0])
    host = ec2_host(world)
    tags = {"gpucluster:cluster": CLUSTER, BURST_TAG: "burst"}
    made = world.ec2.run_instances(
        LaunchTemplate={"LaunchTemplateName": template},
        MinCount=1,
        MaxCount=1,
        TagSpecifications=[{"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}],
    )
    orphan = made["Instances"][0]["InstanceId"]
    report.append(f"an instance of {CLUSTER} with no node: {orphan} (from {template})")
    report.append(f"beside it, an EC2 host of {CLUSTER} (its tags, no burst tag): {host}")
    started = time.monotonic()

    def gone() -> bool:
        state = next(i["State"]["Name"] for i in world.plane.instances() if i["InstanceId"] == orphan)
        if state in ("shutting-down", "terminated"):
            return not world.containers()
        if time.monotonic() - started > 31:  # the grace time over: the timer's unit, run now
            run_reconciler()
        return False

    waited = wait_for("the orphan terminated", gone, 120, world)
    log = burst_log()
    assert f"terminated {orphan}: orphan of no node" in log, log
    report.append(f"terminated by the reconciler {waited:.1f} s after launch (grace 30 s); container removed")
    assert state_of(world, host) == "running" and host not in log  # N1: the host is no orphan
    report.append(f"the EC2 host {host}: still running, never named in the burst log")
    report.append("burst log:\n" + "\n".join(line for line in log.splitlines() if orphan in line))
    transcript(report, capsys, "burst: orphan instance")


def test_4_a_boot_that_never_completes_ends_at_resume_timeout(world, capsys):
    report: list[str] = []
    world.plane.never_boot |= {"burst-1", "burst-2"}
    try:
        started, logged = time.monotonic(), len(burst_log())
        job = sbatch("-p", "burst", "--gres=gpu:1", "--wrap", "hostname")
        report.append(f"(instances never boot) $ sbatch -p burst --gres=gpu:1 --wrap hostname  -> job {job}")
        wait_for("an instance in moto", lambda: world.live(), 40, world)
        (instance,) = world.live()
        node = next(t["Value"] for t in instance["Tags"] if t["Key"] == "gpucluster:node")
        report.append(f"moto: {instance['InstanceId']} for {node}; no container boots")

        # At ResumeTimeout slurmctld powers the node down and runs the fail program; the
        # reconciler's timer may see the powered-down node's instance first and terminate it as
        # an orphan, and the fail program then finds none. Either way the instance is gone.
        by_fail = f"failed {node}: terminated {instance['InstanceId']}"
        by_reconciler = f"terminated {instance['InstanceId']}: orphan of {node}"

        def failed() -> bool:
            log = burst_log()[logged:]
            return f"failed {node}: terminated" in log and (by_fail in log or by_reconciler in log)

        waited = wait_for("the fail program", failed, RESUME_TIMEOUT_S + 60, world)
        report.append("terminated by " + ("the fail program" if by_fail in burst_log()[logged:] else "the reconciler"))
        sh("scancel", job, env=SLURM)
        state = sh("sinfo", "-h", "-N", "-n", node, "-o", "%N %t %E", env=SLURM).stdout
        report.append(f"ResumeTimeout={RESUME_TIMEOUT_S}: fail program {time.monotonic() - started:.1f} s after "
                      f"submit ({waited:.1f} s after the launch); {state.strip()}")  # fmt: skip
        ctld = in_controller("/var/log/slurm/slurmctld.log").read_text()
        timeout = [line for line in ctld.splitlines() if "ResumeTimeout" in line]
        assert timeout, "slurmctld logged no ResumeTimeout"
        report.append("slurmctld.log: " + timeout[-1])
        assert instance["InstanceId"] not in [i["InstanceId"] for i in world.live()]
    finally:
        world.plane.never_boot.clear()
    back_in_the_pool(world)
    report.append("no instance left; the node back in the pool")
    transcript(report, capsys, "burst: boot never completes")


def test_6_a_user_submits_from_shared_dir_and_the_output_lands_there(world, capsys):
    """N4: an ordinary configured user submits from shared_dir on the host, with the default
    output file; the job runs on a burst node as that user, in that directory (the node's
    mount of the host's export), and its output lands in shared_dir."""
    report: list[str] = []
    served, workdir = Path(EXPORT_DIR) / "bstuser", Path(SHARED_DIR) / "bstuser"
    served.mkdir(exist_ok=True)
    os.chown(served, 2391, 2391)
    report.append(f"$ mkdir {served}; chown 2391:2391 {served}   (on the host, in the served directory)")
    sbatch = ["sbatch", "--parsable", "-p", "burst", "--gres=gpu:1", "--wrap", "id -un; hostname; pwd"]
    submit = as_person(SLURM, 2391, sbatch, workdir=str(workdir))
    done = subprocess.run(submit, capture_output=True, text=True, check=False, timeout=60)
    assert done.returncode == 0, done.stderr
    job = done.stdout.strip().split(";")[0]
    report.append(
        f"(bstuser, in {workdir}) $ sbatch -p burst --gres=gpu:1 --wrap 'id -un; hostname; pwd'  -> job {job}"
    )
    waiting = ("PENDING", "CONFIGURING", "")
    wait_for("the job started", lambda: job_field(job, "JobState") not in waiting, RESUME_TIMEOUT_S + 30, world)
    # The node's boot mounted shared_dir before slurmd started: a mountpoint of the host's export.
    (container,) = world.containers()
    mount = sh("lxc-attach", "-n", container, "--", "findmnt", "-n", "-o", "SOURCE,TARGET,FSTYPE", SHARED_DIR,
               check=False).stdout  # fmt: skip
    assert mount.split()[:2] == [f"10.53.3.1:/gpucluster-{CLUSTER}", SHARED_DIR], mount + diagnostics(world)
    report.append(f"{container}: $ findmnt {SHARED_DIR}\n{mount.strip()}")
    wait_for("the job ended", lambda: job_field(job, "JobState") not in (*waiting, "RUNNING", "COMPLETING"), 60, world)
    kept = served / f"slurm-{job}.out"
    ended = sh("scontrol", "show", "job", job, env=SLURM).stdout
    ended += f"{kept}: {kept.read_text() if kept.exists() else '(none)'}\n"
    assert job_field(job, "JobState") == "COMPLETED", ended + diagnostics(world)
    node = job_field(job, "NodeList")
    assert node.startswith("burst-"), node
    fields = {f: job_field(job, f) for f in ("UserId", "WorkDir", "StdOut", "NodeList")}
    report.append(f"job {job} COMPLETED: " + " ".join(f"{k}={v}" for k, v in fields.items()))
    assert fields["StdOut"] == str(workdir / f"slurm-{job}.out"), fields
    wanted = f"bstuser\n{node}\n{workdir}\n"
    # In shared_dir on the host, read by its user (root is nobody on the export: root_squash).
    output = workdir / f"slurm-{job}.out"

    def in_shared_dir() -> str:
        return sh("runuser", "-u", "bstuser", "--", "cat", str(output), check=False).stdout

    wait_for(f"{output}", lambda: in_shared_dir() == wanted, 15, world)
    listing = sh("runuser", "-u", "bstuser", "--", "ls", "-ln", str(output)).stdout.strip()
    report.append(f"(bstuser) $ ls -ln {output}\n{listing}\n(bstuser) $ cat {output}\n{in_shared_dir().rstrip()}")
    # The served file itself: the user's, as the server stored it.
    assert kept.read_text() == wanted
    assert (kept.stat().st_uid, kept.stat().st_gid) == (2391, 2391), sh("ls", "-ln", str(kept)).stdout
    report.append(f"$ ls -ln {kept}\n{sh('ls', '-ln', str(kept)).stdout.strip()}\n$ cat {kept}\n{wanted.rstrip()}")
    transcript(report, capsys, "burst: a user's job from shared_dir, its output in shared_dir")


def test_7_destroy_with_a_burst_node_running_leaves_no_instance(world, capsys):
    report: list[str] = []
    job = sbatch("-p", "burst", "--gres=gpu:1", "--wrap", "sleep 600")
    wait_for("the job running", lambda: job_field(job, "JobState") == "RUNNING", RESUME_TIMEOUT_S + 30, world)
    running = [(i["InstanceId"], i["State"]["Name"]) for i in world.live()]
    report.append(f"job {job} RUNNING on {job_field(job, 'NodeList')}; moto: {running}")
    # The previous test's node, if it went down meanwhile, leaves with its instance.
    wait_for("one burst container", lambda: len(world.containers()) == 1, 60, world)
    # N2: on the running node, the boot's IMDS rule is in place: a process of another uid than
    # root gets no packet to the metadata service out (root's boot-time fetch did get the key).
    (container,) = world.containers()
    rule = ["OUTPUT", "-d", "169.254.169.254/32", "-m", "owner", "!", "--uid-owner", "0", "-j", "REJECT"]
    assert sh("lxc-attach", "-n", container, "--", "iptables", "-w", "-C", *rule, check=False).returncode == 0
    probe = "import socket; s = socket.socket(); s.settimeout(3); s.connect(('169.254.169.254', 80))"
    as_nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "python3", "-c", probe]
    refused = sh("lxc-attach", "-n", container, "--", *as_nobody, check=False)
    assert refused.returncode != 0 and "ConnectionRefusedError" in refused.stderr, refused
    report.append(f"{container}: IMDS rule present; uid 65534 -> 169.254.169.254:80: {refused.stderr.splitlines()[-1]}")
    # N4: the cluster's people on the burst node, as on every node; shared_dir the host's export.
    person = sh("lxc-attach", "-n", container, "--", "getent", "passwd", "bstuser", check=False).stdout
    assert person.startswith("bstuser:x:2391:2391:"), person
    shared = sh("lxc-attach", "-n", container, "--", "mountpoint", SHARED_DIR, check=False)
    assert shared.returncode == 0, shared
    report.append(f"{container}: {person.strip()}; {SHARED_DIR}: {shared.stdout.strip()}")
    host = ec2_host(world)
    removal = destroy(world.commands)
    states = [(i["InstanceId"], i["State"]["Name"]) for i in world.plane.instances()]
    report.append(f"destroy through the harness: {removal.wall_seconds:.1f} s; moto: {states}")
    assert world.live() == [] and {s for _, s in states} == {"terminated"}, states
    assert state_of(world, host) == "running"  # N1: the destroy hook ends burst instances only
    report.append(f"the cluster's EC2 host {host}: still running")
    wait_for("the containers removed", lambda: not world.containers(), 30, world)
    transcript(report, capsys, "burst: destroy with a burst node running")
