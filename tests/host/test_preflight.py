"""The host preflight (components/host/files/preflight.sh) on this machine: every bad host fact
is reported, by name, before anything is changed. Needs root for mknod and dummy links."""

import json
import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import pytest

from components.common.transport import INTERPRETER, script
from components.host.gpu_host import FILES
from tests.host.os_releases import SUPPORTED, UNSUPPORTED, in_mount_namespace
from tests.lxc.driver_layouts import LAYOUTS, VERSION, install

# Dummy bridges, iptables NAT rules and device nodes on this host.
pytestmark = pytest.mark.privileged

PREFLIGHT = script(FILES / "preflight.sh")


def host_state() -> tuple[str, str]:
    links = subprocess.run(["ip", "-o", "addr"], capture_output=True, text=True, check=True).stdout
    rules = subprocess.run(["iptables-save"], capture_output=True, text=True, check=False).stdout
    return links, "\n".join(line for line in rules.splitlines() if not line.startswith("#"))


@pytest.fixture
def preflight(tmp_path):
    assert os.geteuid() == 0, "the preflight tests need root (mknod, foreign interfaces)"
    assert shutil.which("ss") and shutil.which("ip"), "iproute2 is missing: run `bash .ci/run`"
    device = tmp_path / "nvidia0"
    subprocess.run(["mknod", str(device), "c", "195", "0"], check=True)
    environment = {
        "CLUSTER": "pft",
        "IMAGE": "pft-image",
        "GPU_DEVICES": str(device),
        "CONTROL_DEVICES": "",
        "CLUSTER_DIR": "/var/lib/gpucluster-pft-test/pft",
        "NODE_CPUS": "1",
        "NAT_BRIDGE": "pftbr0",
        "NAT_ADDRESS": "10.97.3.1/24",
        "CLUSTER_BRIDGE": "pftbr1",
        "CLUSTER_SUBNET": "10.97.5.0/24",
        "HOST_PORTS": "",
        "CONTAINERS": "pft-c000",
        # The fixture's GPU is a character device with NVIDIA's major and no driver behind it:
        # a stand-in (the driver tests below set GPU_STAND_IN="" for a host with real GPUs).
        "GPU_STAND_IN": "1",
        "DRIVER_FILES": "",
        # The NVIDIA kernel driver's /proc entry: present, as on a GPU host (the driver tests).
        "NVIDIA_DRIVER_PROC": str(tmp_path),
    }
    made_links: list[str] = []

    def run(
        path_first: Path | None = None, hidden: tuple[str, ...] = (), os_release: str | None = None, **changes
    ) -> subprocess.CompletedProcess:
        """The preflight with these parameters changed; `path_first`: a directory of fake host
        tools (ldconfig, nvidia-container-cli) searched before the helpers' PATH; `hidden`:
        host programs it does not find (its PATH is then one directory of links to every
        other program of the host's); `os_release`: the text it finds in /etc/os-release (a
        bind mount in a mount namespace of its own: the host's file is left alone)."""
        before = host_state()
        text = PREFLIGHT
        marker = "# ---- preflight.sh ----\n"
        if hidden:
            programs = tmp_path / "programs"
            programs.mkdir(exist_ok=True)
            for directory in ("/usr/sbin", "/usr/bin", "/sbin", "/bin"):
                for program in Path(directory).iterdir():
                    if program.name not in hidden and not (programs / program.name).exists():
                        (programs / program.name).symlink_to(program)
            text = text.replace(marker, f'{marker}PATH="{programs}"\n')
        if path_first is not None:
            text = text.replace(marker, f'{marker}PATH="{path_first}:$PATH"\n')
        assert text != PREFLIGHT or not (hidden or path_first)
        command = [*INTERPRETER, text]
        if os_release is not None:
            (tmp_path / "os-release").write_text(os_release)
            command = in_mount_namespace({"/etc/os-release": tmp_path / "os-release"}, command)
        done = subprocess.run(
            command,
            env={"PATH": os.environ["PATH"], **environment, **changes},
            capture_output=True,
            text=True,
            check=False,
        )
        assert host_state() == before, "the preflight changed the host"
        return done

    def dummy(name: str, address: str | None = None) -> None:
        subprocess.run(["ip", "link", "add", name, "type", "bridge"], check=True)
        made_links.append(name)
        if address:
            subprocess.run(["ip", "addr", "add", address, "dev", name], check=True)

    def alias(name: str, text: str) -> None:
        subprocess.run(["ip", "link", "set", name, "alias", text], check=True)

    run.dummy = dummy
    run.alias = alias
    run.device = device
    run.cluster_dir = Path(environment["CLUSTER_DIR"])
    yield run
    shutil.rmtree(run.cluster_dir.parent, ignore_errors=True)
    for name in made_links:
        subprocess.run(["ip", "link", "del", name], check=False)


def test_the_supported_distributions_pass(preflight):
    for text in SUPPORTED.values():
        done = preflight(os_release=text)
        assert done.returncode == 0, done.stderr


def test_another_distribution_is_refused_by_name_with_the_supported_ones(preflight):
    for name, (text, found) in UNSUPPORTED.items():
        done = preflight(os_release=text, GPU_DEVICES="/dev/nvidia7")
        assert done.returncode == 1, name
        assert f"this host runs {found}, which the program does not support" in done.stderr, done.stderr
        assert "the cluster's hosts run Debian 12, Debian 13, Ubuntu 22.04 or Ubuntu 24.04" in done.stderr
        # Among the other problems, as every refusal is.
        assert "GPU device /dev/nvidia7 is missing" in done.stderr


def test_a_good_host_passes_and_reports_what_it_found(preflight):
    done = preflight()
    assert done.returncode == 0, done.stderr
    facts = json.loads(done.stdout.splitlines()[-1])
    assert facts["devices"] == [str(preflight.device)]
    assert facts["cgroup_version"] in {"1", "2"}
    assert facts["driver_version"]
    assert facts["uvm_major"]


def test_a_missing_gpu_device_is_named(preflight):
    done = preflight(GPU_DEVICES="/dev/nvidia7")
    assert done.returncode == 1
    assert "GPU device /dev/nvidia7 is missing (gpu.devices): is the NVIDIA driver loaded?" in done.stderr
    assert "Without a GPU, use stand-ins: gpu.stand_in, as stacks/Pulumi.nogpu.yaml does" in done.stderr
    assert "nothing was changed" in done.stderr


def test_a_device_that_is_not_nvidias_is_refused(preflight, tmp_path):
    fake = tmp_path / "nvidia1"
    fake.touch()
    done = preflight(GPU_DEVICES=str(fake))
    assert f"GPU device {fake} is not a character device with NVIDIA's major 195" in done.stderr


def test_a_foreign_interface_with_the_bridge_name_is_refused(preflight):
    preflight.dummy("pftbr0")
    done = preflight()
    assert done.returncode == 1
    assert "interface pftbr0 already exists and is not this cluster's" in done.stderr


def test_a_subnet_already_in_use_is_refused(preflight):
    # As Debian's lxc-net does with lxcbr0 10.0.3.1/24 on stock hosts.
    preflight.dummy("pftother0", "10.97.3.9/24")
    done = preflight()
    assert done.returncode == 1
    assert "pftother0 already has 10.97.3.9/24, inside 10.97.3.0/24 (network.nat_bridge.address)" in done.stderr


def test_a_host_port_in_use_is_refused(preflight):
    with socket.socket() as listener:
        listener.bind(("0.0.0.0", 0))
        listener.listen()
        port = listener.getsockname()[1]
        done = preflight(HOST_PORTS=f"{port}\n")
    assert done.returncode == 1
    assert f"host port {port} is in use by a listening process" in done.stderr


def test_without_iproute2_a_port_in_use_is_still_refused_and_the_missing_ip_is_named(preflight):
    # Seen on a GPU host (a minimal Ubuntu image, 2026-11-26): no ip, no ss. The port checks
    # read the kernel's tables; the subnet check names the package instead of passing blind.
    with socket.socket(socket.AF_INET6) as listener:
        listener.bind(("::", 0))
        listener.listen()
        port = listener.getsockname()[1]
        done = preflight(hidden=("ip", "ss"), HOST_PORTS=f"{port}\n")
    assert done.returncode == 1
    assert f"host port {port} is in use by a listening process" in done.stderr
    assert "iproute2 is not installed on this host (no `ip` command): the subnet check needs it" in done.stderr
    assert "command not found" not in done.stderr, done.stderr


def test_a_free_port_passes_without_iproute2_too(preflight):
    with socket.socket() as probe:
        probe.bind(("0.0.0.0", 0))
        port = probe.getsockname()[1]  # bound, not listening
        done = preflight(hidden=("ss",), HOST_PORTS=f"{port}\n")
    assert done.returncode == 0, done.stderr


def test_a_foreign_container_with_a_node_name_is_refused(preflight):
    container = Path("/var/lib/lxc/pft-c000")
    container.mkdir(parents=True)
    try:
        (container / "config").write_text("lxc.uts.name = someone-elses\n")
        done = preflight()
    finally:
        shutil.rmtree(container)
    assert "LXC container pft-c000 already exists and is not this cluster's" in done.stderr


def test_every_problem_is_reported_at_once(preflight):
    preflight.dummy("pftbr1")
    done = preflight(GPU_DEVICES="/dev/nvidia7")
    assert "/dev/nvidia7 is missing" in done.stderr
    assert "interface pftbr1 already exists" in done.stderr


def test_a_host_port_forwarded_by_someone_else_is_refused(preflight):
    rule = ["PREROUTING", "-p", "tcp", "--dport", "7999", "-j", "DNAT", "--to-destination", "10.96.0.2:80"]
    subprocess.run(["iptables", "-t", "nat", "-A", *rule], check=True)
    try:
        done = preflight(HOST_PORTS="7999")
    finally:
        subprocess.run(["iptables", "-t", "nat", "-D", *rule], check=True)
    assert done.returncode == 1
    assert "host port 7999 is already forwarded by another iptables DNAT rule" in done.stderr


def test_nat_rules_naming_the_port_that_forward_no_tcp_are_no_conflict(preflight):
    rules = [
        ["PREROUTING", "-p", "udp", "--dport", "7998", "-j", "DNAT", "--to-destination", "10.96.0.2:80"],
        ["PREROUTING", "-p", "tcp", "--dport", "7998", "-j", "RETURN"],
    ]
    for rule in rules:
        subprocess.run(["iptables", "-t", "nat", "-A", *rule], check=True)
    try:
        done = preflight(HOST_PORTS="7998")
    finally:
        for rule in rules:
            subprocess.run(["iptables", "-t", "nat", "-D", *rule], check=True)
    assert "host port 7998" not in done.stderr and done.returncode == 0, done.stderr


def test_a_check_that_cannot_run_is_a_problem_not_a_pass(preflight):
    # The subnet check's Python fails on an address it cannot read: that is no pass.
    done = preflight(NAT_ADDRESS="10.97.3.999/24")
    assert done.returncode != 0
    assert "the subnet check could not run: ValueError: '10.97.3.999/24' does not appear to be" in done.stderr


def test_a_bridge_of_another_cluster_names_it_and_the_rename_case(preflight):
    # What a changed `name` meets: the old cluster's bridges, marked with its name.
    preflight.dummy("pftbr0")
    preflight.alias("pftbr0", "gpucluster:oldname")
    done = preflight()
    assert done.returncode == 1
    assert (
        "interface pftbr0 belongs to the cluster 'oldname' (network.*.name): if you renamed the cluster (name), "
        "destroy it under its old name first"
    ) in done.stderr


def test_a_moved_state_dir_of_a_running_cluster_is_refused(preflight):
    preflight.dummy("pftbr0")
    preflight.alias("pftbr0", "gpucluster:pft")
    done = preflight()
    assert done.returncode == 1
    assert "changing host.state_dir in place is not supported" in done.stderr
    preflight.cluster_dir.mkdir(parents=True)
    (preflight.cluster_dir / "munge.key").write_text("k")
    (preflight.cluster_dir / "munge.key").chmod(0o400)
    assert preflight().returncode == 0


def half_made_clone(preflight, rootfs: str) -> subprocess.CompletedProcess:
    """A clone whose create was cut between lxc-copy and the owner marker: only the pending
    marker, written before the clone, says whose it is."""
    container = Path("/var/lib/lxc/pft-c000")
    container.mkdir(parents=True)
    pending = preflight.cluster_dir / "pending" / "pft-c000"
    pending.parent.mkdir(parents=True)
    pending.touch()
    try:
        (container / "config").write_text(f"lxc.rootfs.path = {rootfs}\n")
        return preflight()
    finally:
        shutil.rmtree(container)


def test_a_clone_cut_short_before_its_owner_marker_is_still_ours(preflight):
    done = half_made_clone(preflight, "overlay:/var/lib/lxc/pft-image/rootfs:/var/lib/lxc/pft-c000/delta0")
    assert done.returncode == 0, done.stderr


def test_a_pending_marker_does_not_claim_a_container_on_another_image(preflight):
    done = half_made_clone(preflight, "overlay:/var/lib/lxc/other-image/rootfs:/var/lib/lxc/pft-c000/delta0")
    assert "LXC container pft-c000 already exists and is not this cluster's" in done.stderr


def test_people_whose_names_or_ids_are_taken_are_named(preflight):
    nobody = subprocess.run(["getent", "passwd", "nobody"], capture_output=True, text=True, check=True).stdout
    uid, gid = nobody.split(":")[2:4]
    root_group = subprocess.run(["getent", "group", "0"], capture_output=True, text=True, check=True).stdout
    free = next(i for i in range(2900, 3000) if subprocess.run(["getent", "passwd", str(i)], check=False).returncode)
    done = preflight(USERS=f"nobody:2999:2999:nobody\npft-free:{free}:{free}:pft-free")
    assert done.returncode != 0
    assert f"user nobody exists with uid:gid {uid}:{gid}, users[] says 2999:2999 (users[])" in done.stderr
    assert "pft-free" not in done.stderr
    # Someone else's group name, and a free name with someone else's uid.
    done = preflight(USERS=f"pft-x:{uid}:{free}:{root_group.split(':')[0]}")
    assert f"uid {uid} belongs to nobody, users[] gives it to pft-x (users[])" in done.stderr
    assert f"group {root_group.split(':')[0]} exists with gid 0, users[] says {free} (users[])" in done.stderr
    # Unused names and ids pass (nothing is made by the preflight).
    assert preflight(USERS=f"pft-free:{free}:{free}:pft-free").returncode == 0
    assert subprocess.run(["getent", "passwd", "pft-free"], check=False).returncode == 2


def test_slurmctlds_port_is_no_host_matter(preflight):
    """slurmctld runs in a container (a node's or its own): its port on the host is no concern."""
    assert "CONTROLLER_PORT" not in PREFLIGHT and "(slurmctld) is in use" not in PREFLIGHT


def test_a_state_dir_others_can_write_is_refused(preflight):
    # A world-writable directory on the way to the state dir: a planted munge key would be trusted.
    state = Path(tempfile.mkdtemp(prefix="gpucluster-pft-", dir="/var/lib"))
    try:
        state.chmod(0o777)
        done = preflight(CLUSTER_DIR=f"{state}/pft")
    finally:
        state.rmdir()
    assert done.returncode == 1
    assert f"{state} is not a root-owned directory writable by root only (host.state_dir)" in done.stderr


def test_a_munge_key_not_roots_alone_is_refused(preflight):
    state = Path(tempfile.mkdtemp(prefix="gpucluster-pft-", dir="/var/lib"))
    try:
        state.chmod(0o755)
        (state / "munge.key").write_bytes(b"planted")
        (state / "munge.key").chmod(0o644)
        done = preflight(CLUSTER_DIR=str(state))
    finally:
        shutil.rmtree(state)
    assert done.returncode == 1
    assert f"munge key {state}/munge.key exists but is not a regular file owned by root with mode 0400" in done.stderr


def test_more_cpus_than_the_host_has_are_refused(preflight):
    wanted = os.cpu_count() + 1
    done = preflight(NODE_CPUS=str(wanted))
    assert done.returncode == 1
    assert f"nodes[].cpus: a node asks for {wanted} CPUs" in done.stderr
    assert preflight(NODE_CPUS=str(os.cpu_count())).returncode == 0


def test_more_memory_than_the_host_has_is_refused(preflight):
    meminfo = Path("/proc/meminfo").read_text().splitlines()
    total_mb = int(next(line.split()[1] for line in meminfo if line.startswith("MemTotal:"))) // 1024
    done = preflight(NODE_MEMORY_MB=str(total_mb))
    assert done.returncode == 1
    assert f"nodes[].memory_mb: this host's nodes need {total_mb} MB in all" in done.stderr
    assert f"the host has {total_mb} MB, of which 1024 MB stay with the host" in done.stderr
    assert preflight(NODE_MEMORY_MB=str(total_mb - 1024)).returncode == 0


def test_a_control_device_that_is_not_a_character_device_is_refused(preflight, tmp_path):
    fake = tmp_path / "nvidiactl"
    fake.touch()
    done = preflight(CONTROL_DEVICES=f"{fake}\n/dev/nvidia-absent")
    assert done.returncode == 1
    assert f"control device {fake} is not a character device (gpu.control_devices)" in done.stderr
    assert "nvidia-absent" not in done.stderr  # absent control devices are optional


# ---- the driver of real GPUs, and the cgroup controllers LXC delegates ----


def host_has_libcuda() -> bool:
    listing = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, check=False).stdout
    return "libcuda.so.1 " in listing or shutil.which("nvidia-container-cli") is not None


def test_real_gpus_without_a_driver_library_are_refused_naming_what_was_looked_for(preflight):
    if host_has_libcuda():
        pytest.skip("this host has an NVIDIA driver: the refusal is shown with fake tools below")
    done = preflight(GPU_STAND_IN="")
    assert done.returncode == 1
    assert "preflight failed, nothing was changed" in done.stderr
    assert (
        "no NVIDIA driver library libcuda.so.1 found on this host for its GPUs (gpu.devices: real GPUs, "
        "not stand-ins): looked for libcuda.so.1, libnvidia-ml.so.1, libnvidia-ptxjitcompiler.so.1 and "
        "nvidia-smi; the host's loader cache (`ldconfig -p`) has no libcuda.so.1 for x86-64"
    ) in done.stderr
    assert "nvidia-container-cli is not installed" in done.stderr
    assert "/etc/ld.so.conf.d/" in done.stderr and "gpu.driver_files" in done.stderr


def test_real_gpus_without_the_kernel_driver_loaded_are_not_asked_for_its_libraries(preflight, tmp_path):
    if host_has_libcuda():
        pytest.skip("this host has an NVIDIA driver")
    done = preflight(GPU_STAND_IN="", NVIDIA_DRIVER_PROC=str(tmp_path / "no-driver"))
    assert done.returncode == 0, done.stderr
    assert "libcuda" not in done.stderr


def test_stand_ins_need_no_driver(preflight):
    done = preflight()
    assert done.returncode == 0, done.stderr
    assert "libcuda" not in done.stderr


@pytest.mark.parametrize("layout", ["debian-multiarch", "usr-local-nvidia"])
def test_real_gpus_with_the_driver_found_pass_and_report_its_files(preflight, tmp_path, layout):
    tools = install(tmp_path / "root", layout)
    done = preflight(path_first=tools, GPU_STAND_IN="")
    assert done.returncode == 0, done.stderr
    facts = json.loads(done.stdout.splitlines()[-1])
    libdir = LAYOUTS[layout][0]
    assert f"{tmp_path}/root/{libdir}/libcuda.so.{VERSION}" in facts["driver_files"]


def test_an_override_without_libcuda_is_refused_naming_the_field(preflight, tmp_path):
    tools = install(tmp_path / "root", "usr-local-nvidia")
    smi = f"{tmp_path}/root/usr/local/nvidia/bin/nvidia-smi"
    done = preflight(path_first=tools, GPU_STAND_IN="", DRIVER_FILES=smi)
    assert done.returncode == 1
    assert f"gpu.driver_files ({smi}) matches no libcuda.so*" in done.stderr


def test_nvidia_container_cli_without_libcuda_is_named(preflight, tmp_path):
    tools = tmp_path / "bin"
    tools.mkdir()
    (tools / "nvidia-container-cli").write_text('#!/bin/sh\n[ "$1" = list ] && exit 0\nexit 1\n')
    (tools / "nvidia-container-cli").chmod(0o755)
    done = preflight(path_first=tools, GPU_STAND_IN="")
    assert done.returncode == 1
    assert "`nvidia-container-cli list --libraries` (NVIDIA's container toolkit) lists no libcuda.so" in done.stderr


def test_a_served_directory_with_files_the_cluster_did_not_make_is_refused_unless_adopted(preflight, tmp_path):
    served = tmp_path / "export"
    served.mkdir()
    (served / "passwd").write_text("someone's\n")
    conf_dir = tmp_path / "nfs-server"
    check = {"SERVED_DIRECTORY": str(served), "SERVED_CONF_DIR": str(conf_dir), "SERVED_ADOPT": ""}
    done = preflight(**check)
    assert done.returncode == 1
    assert (
        f"shared_fs.directory: {served} already exists and holds 1 entries the cluster did not make (e.g. passwd)"
        in (done.stderr)
    )
    assert "shared_fs.adopt_existing: true" in done.stderr
    assert preflight(**{**check, "SERVED_ADOPT": "1"}).returncode == 0
    # Served by this cluster already (its server config names it; an older release's), or
    # marked by it (made by it: a later apply, after a destroy too): served again.
    conf_dir.mkdir()
    (conf_dir / "ganesha.conf").write_text(f"EXPORT {{\n  Path = {served};\n}}\n")
    assert preflight(**check).returncode == 0
    (conf_dir / "ganesha.conf").unlink()
    (served / ".gpucluster-served").write_text("pft\n")
    assert preflight(**check).returncode == 0
    (served / ".gpucluster-served").write_text("another\n")  # another cluster's
    assert "holds 2 entries" in preflight(**check).stderr
    # Missing or empty: nothing to refuse.
    assert preflight(**{**check, "SERVED_DIRECTORY": str(tmp_path / "new")}).returncode == 0
    (tmp_path / "empty").mkdir()
    assert preflight(**{**check, "SERVED_DIRECTORY": str(tmp_path / "empty")}).returncode == 0
