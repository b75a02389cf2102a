"""End-to-end lifecycle on this machine: a simulated reboot brought back by exactly what the
boot unit runs, drift named by ./verify.sh, a clone cut short before its owner marker, and a
destroy beside a second cluster (with the kernel limits each adds and gives back, and a node
whose create fails late). The first three run inside tests/test_e2e.py's cluster (they need
one up); the last is its own test with two one-node clusters.
"""

import copy
import shlex
import time
from pathlib import Path

import pytest

from components.composition.stack_config import parse_stack_config
from components.host.gpu_host import KERNEL_LIMITS_PER_CONTAINER
from ops.verify import verify
from tests.harness.e2e_teardown import remove_stand_in_gpus
from tests.harness.engine_cluster import CommandFailedError, apply, destroy, host_commands, update
from tests.harness.program_harness import run_program, stack_config
from tests.test_e2e import check_cluster, leftovers, require_host, sh, slurm_env, stand_in_gpus

IP_FORWARD_DIR = Path("/var/lib/gpucluster-host/ip_forward")
KEEP_DIR = Path("/var/cache/gpucluster")
ROOT = Path(__file__).resolve().parent.parent


def boot_command(cluster: str) -> list[str]:
    """The boot unit's ExecStart, read from the installed unit file."""
    unit = Path(f"/etc/systemd/system/gpucluster-{cluster}.service").read_text()
    assert Path(f"/etc/systemd/system/multi-user.target.wants/gpucluster-{cluster}.service").is_symlink()
    (line,) = [line for line in unit.splitlines() if line.startswith("ExecStart=")]
    return shlex.split(line.removeprefix("ExecStart="))


def run_verify(config: dict) -> tuple[int, str]:
    done = verify(parse_stack_config(config).cluster)
    return done.returncode, done.stdout + done.stderr


def wait_idle(cluster: str, nodes: list[str], seconds: int = 180) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        states = sh("sinfo", "-h", "-N", "-o", "%N %T", env=slurm_env(cluster), check=False).stdout.split("\n")
        if {line.split()[0] for line in states if line.endswith(" idle")} == set(nodes):
            return
        time.sleep(2)
    raise AssertionError(f"nodes not idle {seconds}s after the bring-up: {states}")


def simulate_reboot(config: dict, outputs: dict, report: list[str], check=check_cluster) -> None:
    """What a reboot takes away, taken away by hand; then the boot unit's ExecStart, exactly;
    then `check(config, outputs, report)` and ./verify.sh."""
    cluster = config["cluster"]
    name, net = cluster["name"], cluster["network"]
    containers = sorted(p.name for p in Path("/var/lib/lxc").glob(f"{name}-*") if p.name != f"{name}-image")
    # A reboot shuts containers down cleanly (lxc.service stops them; systemd inside stops
    # slurmctld, which saves its state), then takes away everything that lives in memory.
    for container in containers:
        sh("lxc-stop", "-n", container, "-t", "60", timeout=120)
    daemons = ("munge/munged.pid", "slurmctld.pid", "cluster-status.pid")
    for pidfile in (f"/var/lib/gpucluster/{name}/{daemon}" for daemon in daemons):
        pid = Path(pidfile).read_text().strip() if Path(pidfile).exists() else ""
        if pid and Path(f"/proc/{pid}").exists():
            sh("kill", pid)
            while Path(f"/proc/{pid}").exists():
                time.sleep(0.2)
    for bridge in (net["nat_bridge"]["name"], net["cluster_bridge"]["name"]):
        sh("ip", "link", "del", bridge)
    for table in ("nat", "filter"):
        for rule in sh("iptables", "-t", table, "-S").stdout.splitlines():
            if f"gpucluster:{name}:" in rule:
                sh("iptables", "-t", table, *shlex.split(rule.replace("-A ", "-D ", 1)))
    # /run is a tmpfs: a reboot empties it, the stand-in GPUs' device directory included.
    sh("rm", "-rf", f"/run/gpucluster-{name}", f"/run/gpucluster-{name}-dev")
    # ip_forward goes back to the host's own value (the one recorded before the first cluster).
    sh("sysctl", "-qw", f"net.ipv4.ip_forward={(IP_FORWARD_DIR / 'orig').read_text().strip()}")
    code, drifted = run_verify(config)
    assert code == 1, drifted
    stand_ins, web_app = cluster.get("gpu", {}).get("stand_in"), cluster.get("web_app")
    assert not stand_ins or f"MISSING  stand-in GPU /run/gpucluster-{name}-dev/nvidia0 (195:0)" in drifted, drifted
    assert not web_app or "MISSING  cluster-status writer" in drifted, drifted
    report.append("$ ./verify.sh e2e   (after the simulated reboot, before the boot unit)\n" + drifted)

    command = boot_command(name)
    booted_at = time.time()
    started = time.monotonic()
    done = sh(*command, env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}, timeout=600)
    seconds = time.monotonic() - started
    report.append(f"$ {shlex.join(command)}   (the unit's ExecStart; {seconds:.1f} s)\n{done.stderr}")
    wait_idle(name, [node["name"] for node in cluster["nodes"]])
    report.append(f"nodes idle {time.monotonic() - started:.1f} s after the bring-up started")
    check(config, outputs, report)
    # The stand-ins are back (check's GPU jobs ran on them) and the panel's snapshot is fresh.
    if stand_ins:
        wanted = {f"nvidia{i}": (195, i) for i in range(stand_ins["count"])}
        assert stand_in_gpus(name) == {**wanted, "nvidiactl": (195, 255)}
    snapshot = Path(f"/var/lib/gpucluster/{name}/status/cluster.json")
    deadline = time.monotonic() + 30
    while web_app and not (snapshot.exists() and snapshot.stat().st_mtime > booted_at):
        assert time.monotonic() < deadline, "no cluster snapshot written since the bring-up"
        time.sleep(1)
    code, clean = run_verify(config)
    assert code == 0, clean
    assert not web_app or "ok       cluster-status writer" in clean, clean
    report.append("$ ./verify.sh e2e   (after the boot unit)\n" + clean)


def drift_is_named(config: dict, report: list[str]) -> None:
    """One rule deleted by hand: verify names it and fails; the bring-up restores it."""
    name = config["cluster"]["name"]
    port = config["cluster"]["web_app"]["host_port"]
    tag = f"gpucluster:{name}:fwd:{port}"
    (rule,) = [r for r in sh("iptables", "-S", "FORWARD").stdout.splitlines() if tag in r]
    sh("iptables", *shlex.split(rule.replace("-A ", "-D ", 1)))
    report.append(f"$ iptables {rule.replace('-A ', '-D ', 1)}   (by hand)")
    code, output = run_verify(config)
    report.append(f"$ ./verify.sh e2e   (exit {code})\n{output}")
    missing = [line for line in output.splitlines() if not line.startswith("ok ")]
    assert code == 1
    assert missing[0].startswith("MISSING  iptables rule: filter FORWARD ") and tag in missing[0], missing
    # The drift line, then the two repairs it advises (the boot script, a replace).
    assert len(missing) == 4 and missing[1].startswith("drift:"), missing
    assert "boot.sh" in missing[2] and "--replace" in missing[3], missing
    sh(*boot_command(name), env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"})
    code, output = run_verify(config)
    assert code == 0, output
    report.append("$ ./verify.sh e2e   (after the bring-up ran again)\n" + output.splitlines()[-1])


def interrupted_clone_recovers(config: dict, commands: list, report: list[str]) -> None:
    """A node's create cut between lxc-copy and the owner marker: the next apply recovers."""
    name = config["cluster"]["name"]
    node = config["cluster"]["nodes"][-1]["name"]
    container, image = f"{name}-{node}", f"{name}-image"
    sh("lxc-stop", "-n", container, "-k")
    sh("lxc-destroy", "-n", container, "-f")
    # As container_create.sh does up to the interruption: the pending marker, then the clone.
    pending = Path(f"/var/lib/gpucluster/{name}/pending/{container}")
    pending.parent.mkdir(exist_ok=True)
    pending.touch()
    sh("lxc-copy", "-n", image, "-N", container, "-s", "-B", "overlay")
    assert not Path(f"/var/lib/lxc/{container}/gpucluster-owner").exists()
    code, output = run_verify(config)
    assert code == 1 and f"FOREIGN  container {container} (owner '', half-made by an interrupted run)" in output
    started = time.monotonic()
    apply(commands)
    report.append(
        f"clone of {container} cut before its owner marker: next apply recovered it in "
        f"{time.monotonic() - started:.1f} s (re-cloned, slurmd configured)"
    )
    assert Path(f"/var/lib/lxc/{container}/gpucluster-owner").read_text().strip() == name
    assert not pending.exists()
    code, output = run_verify(config)
    assert code == 0, output


# ---- destroy beside a second cluster ----


def small_cluster(name: str, octet: int, host_port: int | None) -> dict:
    """A one-node cluster of the e2e stack's shape with its own names, subnets and port
    (no web app without a port)."""
    config = stack_config("e2e")
    cluster = config["cluster"]
    cluster["name"] = name
    cluster["host"]["shared_dir"] = f"/srv/gpucluster/{name}/shared"
    cluster["network"] = {
        "nat_bridge": {"name": f"{name}br0", "address": f"10.{octet}.3.1/24"},
        "cluster_bridge": {"name": f"{name}br1", "subnet": f"10.{octet}.5.0/24"},
    }
    cluster["gpu"] = {"stand_in": {"count": 1}}
    cluster["nodes"] = [{"name": "c000", "nat_address": f"10.{octet}.3.2", "cluster_address": f"10.{octet}.5.1"}]
    # One slurmctld per host can listen on its port: the first cluster's is on the host.
    cluster["slurm"]["controller"] = (
        {"placement": "host"} if host_port is None else {"placement": "container", "node": "c000"}
    )
    cluster["web_app"] = {"name": "web", "nat_address": f"10.{octet}.3.10", "host_port": host_port}
    if host_port is None:
        del cluster["web_app"]
    return config


def inotify_limits() -> dict[str, int]:
    return {key: int(Path("/proc/sys", key.replace(".", "/")).read_text()) for key in KERNEL_LIMITS_PER_CONTAINER}


def kernel_shares(cluster: str) -> dict[str, int]:
    """The shares of the kernel limits the cluster's file in /etc/sysctl.d/ records."""
    lines = Path(f"/etc/sysctl.d/90-gpucluster-{cluster}.conf").read_text().splitlines()
    return {line.split()[2]: int(line.split()[3]) for line in lines if line.startswith("# share ")}


# lxc-start as the scripts find it first on their PATH: it refuses one container, which its
# create has just made (a create that fails late).
REFUSING_LXC_START = Path("/usr/local/sbin/lxc-start")


def refuse_start_of(container: str) -> None:
    assert not REFUSING_LXC_START.exists(), f"{REFUSING_LXC_START} is the host's own"
    REFUSING_LXC_START.write_text(
        f'#!/bin/sh\ncase " $* " in *" {container} "*)\n'
        f'  echo "the test refuses to start {container}" >&2; exit 1 ;;\nesac\n'
        'exec /usr/bin/lxc-start "$@"\n'
    )
    REFUSING_LXC_START.chmod(0o755)


def packages() -> str:
    return sh("dpkg-query", "-W", "-f", "${Package} ${Version} ${Status}\n").stdout


@pytest.mark.e2e
def test_destroy_beside_a_second_cluster(capsys):
    require_host()
    first, second = small_cluster("sidea", 45, None), small_cluster("sideb", 46, 7011)
    runs = {c["cluster"]["name"]: host_commands(run_program(c, stack="e2e")) for c in (first, second)}
    report: list[str] = []
    for commands in runs.values():
        destroy(commands)
    forward_before = Path("/proc/sys/net/ipv4/ip_forward").read_text().strip()
    shared_parent = Path("/srv/gpucluster")
    shared_before = shared_parent.exists()
    try:
        limits = inotify_limits()
        apply(runs["sidea"])
        apply(runs["sideb"])
        # Each cluster adds its share of the kernel limits to what the host had.
        shares = {name: kernel_shares(name) for name in runs}
        assert inotify_limits() == {k: v + shares["sidea"][k] + shares["sideb"][k] for k, v in limits.items()}
        assert sorted(p.name for p in (IP_FORWARD_DIR / "users").iterdir()) == ["sidea", "sideb"]
        # As on a fresh host: sidea's record says it installed these (the host had them already).
        Path("/var/lib/gpucluster/sidea/host-packages").write_text("procps\ncurl\n")
        installed = packages()
        job = sh("srun", "--chdir=/tmp", "hostname", env=slurm_env("sideb")).stdout
        assert job.strip() == "c000"

        removal = destroy(runs["sidea"])
        assert packages() == installed, "destroying a cluster changed the host's packages"
        kept = KEEP_DIR / "sidea" / "packages-left-installed"
        assert kept.read_text() == "curl\nprocps\n"
        assert leftovers("sidea") == []
        assert sorted(p.name for p in (IP_FORWARD_DIR / "users").iterdir()) == ["sideb"]
        assert Path("/proc/sys/net/ipv4/ip_forward").read_text().strip() == "1"
        code, output = run_verify(second)
        assert code == 0, output
        states = sh("sinfo", "-h", "-N", "-o", "%N %T", env=slurm_env("sideb")).stdout
        assert states.split() == ["c000", "idle"], states
        body = sh("curl", "-fsS", "--max-time", "30", "http://10.46.3.1:7011/healthz").stdout
        assert '"ok"' in body
        report.append(f"destroy sidea beside sideb: {removal.wall_seconds:.1f} s; dpkg-query -W unchanged")
        report.append(f"sideb after: sinfo {states.strip()!r}; web {body.strip()}; verify: {output.splitlines()[-1]}")
        report.append(f"kept: {kept} = {kept.read_text().split()}")
        purge = sh(str(ROOT / "purge-kept.sh"), "sidea").stdout
        report.append("$ ./purge-kept.sh sidea\n" + purge)
        assert not (KEEP_DIR / "sidea").exists()
        assert inotify_limits() == {k: v + shares["sideb"][k] for k, v in limits.items()}

        # A node whose create fails after it made its container: nothing of it stays outside
        # the state, and the destroy below removes the cluster, its image included.
        grown = copy.deepcopy(second)
        grown["cluster"]["nodes"].append(
            {"name": "c001", "nat_address": "10.46.3.3", "cluster_address": "10.46.5.2", "gpus": 0}
        )
        grown_run = host_commands(run_program(grown, stack="e2e"))
        refuse_start_of("sideb-c001")
        try:
            with pytest.raises(CommandFailedError, match="sideb-c001"):
                update(runs["sideb"], grown_run)
        finally:
            REFUSING_LXC_START.unlink()
        assert not Path("/var/lib/lxc/sideb-c001").exists(), "the failed create left its container"
        runs["sideb"] = grown_run
        report.append("sideb-c001's create failed after its clone was made: the clone went with it")
    finally:
        REFUSING_LXC_START.unlink(missing_ok=True)
        for commands in runs.values():
            destroy(commands)
        sh(str(ROOT / "purge-kept.sh"), "sidea", check=False)
        remove_stand_in_gpus()
        # Each cluster removes the shared directories it made; a parent made by the first
        # cluster and still holding the second's stays behind (the record is per cluster).
        if not shared_before:
            sh("rmdir", "--ignore-fail-on-non-empty", str(shared_parent), check=False)
    assert leftovers("sideb") == []
    assert inotify_limits() == limits
    assert not IP_FORWARD_DIR.exists()
    assert Path("/proc/sys/net/ipv4/ip_forward").read_text().strip() == forward_before
    with capsys.disabled():
        print("\n== destroy beside a second cluster ==\n" + "\n".join(report))
