"""End-to-end: one cluster on two hosts, the second reached only through a jump host, with a
shared filesystem, accounting and GPU health across the hosts.

h1 is this machine (c000 with slurmctld, c001); h2 a network namespace with its own sshd, LXC
path, state and run directories (c002, c003; tests/harness/ssh_hosts.py); the jump host a
third namespace with its own sshd. This machine cannot dial h2's sshd (an OUTPUT rule rejects
it): every command of h2 goes through the jump host (`connection.bastion`, its host key
pinned). h1 serves the export (shared_fs: served, NFS-Ganesha) and both hosts mount it at
their shared_dir with the stand-in client (this machine's kernel has no NFS client). The
accounting database runs on h2 (`accounting.host: h2`): slurmctld on h1 and slurmdbd on h2
reach each other over the routes between the hosts' container subnets. h2's simulated reboot
takes its mount, nodes and database away; its boot unit brings them back. Everything is
removed in `finally` blocks, and the host is compared with its state before the test.
"""

import copy
import shlex
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from components.common.transport import INTERPRETER, script
from components.composition.host_state import render_host_state
from components.composition.stack_config import parse_stack_config
from components.host.boot_unit import FILES as HOST_FILES
from tests.harness import command_executor, ssh_hosts
from tests.harness.e2e_teardown import PLACEHOLDER_KEY, run_here, two_host_config
from tests.harness.engine_cluster import CommandFailedError, State, destroy, destroy_state, host_commands, up
from tests.harness.program_harness import run_program
from tests.harness.slurm_client import SlurmClient, gpus_of, wait_for
from tests.harness.ssh_hosts import SshHost
from tests.test_e2e import CONNECT, host_snapshot, leftovers, require_host, sh, slurm_env

pytestmark = pytest.mark.e2e
CLUSTER = "e2en"
SLURM = slurm_env(CLUSTER)
SECRET = "e2enSshKey"
SECOND = SshHost("n2", "10.52.0.2", 22, netns="e2en-h2", site_address="10.52.0.1")
JUMP = SshHost("nj", "10.52.0.6", 22, netns="e2en-jump", site_address="10.52.0.5")
SHARED_DIR = f"/srv/gpucluster/{CLUSTER}/shared"
EXPORT_DIR = f"/srv/gpucluster/{CLUSTER}/export"
SECOND_DIRS = {
    "state_dir": "/var/lib/gpucluster-e2en-h2",
    "run_dir": "/run/gpucluster-e2en-h2-run",
    "lxc_dir": "/var/lib/lxc-e2en-h2",
}
SECOND_STATE = f"{SECOND_DIRS['state_dir']}/{CLUSTER}"
DIAGNOSTIC_LOGS = (
    f"/var/lib/gpucluster/{CLUSTER}/nfs-server/ganesha.log",
    f"/var/lib/gpucluster/{CLUSTER}/nfs-client.log",
    f"{SECOND_STATE}/nfs-client.log",
)
USERS = [{"name": "dana", "uid": 2111, "gid": 2111}, {"name": "erin", "uid": 2112, "gid": 2112}]
UIDS = {user["name"]: user["uid"] for user in USERS}
HEALTH_INTERVAL_S = 10
SACCT_FORMAT = "JobID,JobName,User,Account,NodeList,AllocTRES,State"
BLOCK_TAG = "gpucluster-e2e-site:e2en-no-direct-ssh"
BLOCK = ["OUTPUT", "-d", SECOND.address, "-p", "tcp", "--dport", str(SECOND.port),
         "-m", "comment", "--comment", BLOCK_TAG, "-j", "REJECT", "--reject-with", "tcp-reset"]  # fmt: skip


def config_of(host_key: str = PLACEHOLDER_KEY, jump_key: str = PLACEHOLDER_KEY) -> dict:
    """The two-host stack renamed, on its own addresses, h2 reached through the jump host, the
    shared filesystem served from h1 (the controller's host), one stand-in GPU per node and
    the GPU health check on every node; the accounting database on h2, with the accounts
    `physics` (dana, one GPU at once across the cluster) and `chem` (erin, no limit)."""
    config = copy.deepcopy(two_host_config(host_key))
    cluster = config["cluster"]
    cluster["name"] = CLUSTER
    first, second = cluster["hosts"]
    first.update(address=SECOND.site_address, shared_dir=SHARED_DIR)
    second.update(address=SECOND.address, shared_dir=SHARED_DIR, **SECOND_DIRS)
    second["connection"].update(
        address=SECOND.address,
        private_key_secret=SECRET,
        bastion={"address": JUMP.address, "port": JUMP.port, "host_key": jump_key},
    )
    for host, octet in ((first, 53), (second, 54)):
        # Stand-ins only: no driver files from this machine, whatever it has.
        host["gpu"] = {"stand_in": {"count": 2}, "driver_files": [], "cuda_path": None}
        host["network"] = {
            "nat_bridge": {"name": f"{CLUSTER}br0", "address": f"10.{octet}.3.1/24"},
            "cluster_bridge": {"name": f"{CLUSTER}br1", "subnet": f"10.{octet}.5.0/24"},
        }
    for node, (octet, last) in zip(cluster["nodes"], [(53, 2), (53, 3), (54, 2), (54, 3)], strict=True):
        node.update(nat_address=f"10.{octet}.3.{last}", cluster_address=f"10.{octet}.5.{last}")
    cluster["shared_fs"] = {"kind": "served", "directory": EXPORT_DIR, "client": "stand_in"}
    cluster["slurm"]["health_check"] = {"interval_s": HEALTH_INTERVAL_S}
    cluster["users"] = copy.deepcopy(USERS)
    cluster["accounting"] = {
        "host": "h2",
        "nat_address": "10.54.3.20",
        "keep_dump": False,
        "accounts": [{"name": "physics", "gpus": 1, "users": ["dana"]}, {"name": "chem", "users": ["erin"]}],
    }
    return config


def on_second(*argv: str, check: bool = True, env: dict | None = None, timeout: int = 180):
    """A command run on h2 directly (its namespaces), to look or to simulate its reboot."""
    return sh(*ssh_hosts.host_argv(SECOND), *argv, check=check, env=env, timeout=timeout)


def in_node_of_second(node: str, *argv: str) -> subprocess.CompletedProcess:
    return on_second("lxc-attach", "-P", SECOND_DIRS["lxc_dir"], "-n", f"{CLUSTER}-{node}", "--", *argv)


CLIENT = SlurmClient(SLURM, UIDS)  # Slurm commands, as root or as the cluster's people


def recorded(start: str, names: set[str], env: dict) -> bool:
    """Whether sacct (through `env`'s slurm.conf) has every job named, completed."""
    rows = [r for r in SlurmClient(env).sacct_rows(start, SACCT_FORMAT) if r["JobName"] in names]
    return len(rows) == len(names) and all(r["State"] == "COMPLETED" for r in rows)


def recorded_on_second(start: str, names: set[str]) -> bool:
    """Whether h2's own client (its wrappers, run in h2's namespaces) has every job named, completed."""
    done = on_second(
        f"{SECOND_STATE}/bin/sacct", "-a", "-X", "-nP", "-S", start, f"--format={SACCT_FORMAT}", check=False
    )
    if done.returncode != 0:
        return False
    keys = SACCT_FORMAT.split(",")
    rows = [dict(zip(keys, line.split("|"), strict=True)) for line in done.stdout.splitlines() if line]
    rows = [row for row in rows if row["JobName"] in names]
    return len(rows) == len(names) and all(row["State"] == "COMPLETED" for row in rows)


def person_exists(name: str) -> bool:
    return sh("getent", "passwd", name, check=False).returncode == 0


# The people of the cluster are added and removed again: these files are rewritten (the test
# checks the people are gone instead).
PEOPLE_FILES = {
    f"/etc/{name}{suffix}"
    for name in ("passwd", "group", "shadow", "gshadow", "subuid", "subgid")
    for suffix in ("", "-")
}


def snapshot() -> dict:
    found = host_snapshot()
    found["etc"] = [entry for entry in found["etc"] if entry[0] not in PEOPLE_FILES]
    return found


def stand_in_clients() -> list[str]:
    """Pids of the stand-in NFS clients of this cluster, on either host."""
    ps = sh("ps", "-eo", "pid=,args=").stdout
    return [line.split()[0] for line in ps.splitlines() if "nfs-client.py" in line and f"/{CLUSTER}/" in line]


def teardown_stack() -> None:
    """Destroy whatever a run left (each command run on its host without SSH), then the hosts."""
    try:
        commands = host_commands(run_program(config_of(), stack=CLUSTER, secrets={SECRET: "placeholder"}))
        if not Path(f"/run/netns/{SECOND.netns}").exists():
            commands = [c for c in commands if not c.connection]
        destroy(run_here(commands, {SECOND.address: SECOND}))
    finally:
        for pid in stand_in_clients():  # a mount its delete could not reach
            sh("kill", pid, check=False)
        while sh("iptables", "-D", *BLOCK, check=False).returncode == 0:
            pass
        # In the reverse order of their start: the first one started recorded the machine's
        # own ip_forward, which it puts back last.
        ssh_hosts.remove(SECOND)
        ssh_hosts.remove(JUMP)
        for directory in SECOND_DIRS.values():
            sh("rmdir", directory, check=False)
        sh("rm", "-rf", EXPORT_DIR)  # the kept files, removed as docs/hosts.md says
        for directory in (SHARED_DIR, Path(SHARED_DIR).parent, Path(SHARED_DIR).parent.parent):
            sh("rmdir", str(directory), check=False)


def mounts(report: list[str]) -> None:
    here = sh("findmnt", "-n", "-o", "SOURCE,TARGET,FSTYPE,OPTIONS", SHARED_DIR).stdout
    there = on_second("findmnt", "-n", "-o", "SOURCE,TARGET,FSTYPE,OPTIONS", SHARED_DIR).stdout
    report.append(f"$ findmnt {SHARED_DIR}   (on h1)\n{here}$ findmnt {SHARED_DIR}   (on h2)\n{there}")
    assert here.startswith(f"{SECOND.site_address}:/gpucluster-{CLUSTER} {SHARED_DIR} fuse"), here
    assert there.startswith(f"{SECOND.site_address}:/gpucluster-{CLUSTER} {SHARED_DIR} fuse"), there


def srun(*argv: str, timeout: int = 120) -> str:
    return sh("srun", f"--chdir={SHARED_DIR}", *argv, env=SLURM, timeout=timeout).stdout


def reboot_second_host(report: list[str]) -> None:
    """What a reboot of h2 takes away (its containers, the accounting database's among them,
    munged, bridges, rules, routes, the mount and its client, /run), taken away by hand; then
    h2's boot unit's ExecStart, exactly."""
    lxc = ["-P", SECOND_DIRS["lxc_dir"]]
    for container in ("c002", "c003", "db"):
        on_second("lxc-stop", *lxc, "-n", f"{CLUSTER}-{container}", "-t", "60", timeout=120)
    pid = on_second("cat", f"{SECOND_STATE}/munge/munged.pid", check=False).stdout.strip()
    if pid:
        on_second("kill", pid)
    # The mount goes with its client process, as at a power-off.
    client = on_second("cat", f"{SECOND_STATE}/nfs-client.pid").stdout.strip()
    on_second("kill", "-KILL", client)
    on_second("umount", "-l", SHARED_DIR)
    for bridge in (f"{CLUSTER}br0", f"{CLUSTER}br1"):
        on_second("ip", "link", "del", bridge)
    for rule in on_second("iptables", "-S").stdout.splitlines():
        if f"gpucluster:{CLUSTER}:" in rule:
            on_second("iptables", *shlex.split(rule.replace("-A ", "-D ", 1)))
    on_second(
        "rm",
        "-rf",
        f"{SECOND_DIRS['run_dir']}/gpucluster-{CLUSTER}",
        f"{SECOND_DIRS['run_dir']}/gpucluster-{CLUSTER}-dev",
    )
    deadline = time.monotonic() + 30
    while len(stand_in_clients()) > 1:  # h1's stays
        assert time.monotonic() < deadline, "h2's stand-in client did not end with its mount"
        time.sleep(0.5)
    gone = on_second("findmnt", SHARED_DIR, check=False).returncode
    no_dbd = sh("sacctmgr", "-n", "show", "cluster", env=SLURM, check=False, timeout=60)
    assert no_dbd.returncode != 0, no_dbd
    report.append(f"$ sacctmgr show cluster   (on h1, h2 down)\n{(no_dbd.stdout + no_dbd.stderr).strip()}")
    report.append(
        "h2 'rebooted': containers (nodes, database) stopped, bridges, rules, /run and the mount gone "
        f"(findmnt: {gone})"
    )
    assert gone != 0
    code, drifted = verify_second()
    missing = [line for line in drifted.splitlines() if line.startswith("MISSING") and "mount of" in line]
    report.append("$ ./verify.sh e2en h2   (on h2, before its boot unit)\n" + "\n".join(missing))
    assert code == 1 and missing == [f"MISSING  mount of {SECOND.site_address}:/gpucluster-{CLUSTER} at {SHARED_DIR}"]
    unit = (SECOND.directory / "systemd-system" / f"gpucluster-{CLUSTER}.service").read_text()
    (exec_start,) = [line.removeprefix("ExecStart=") for line in unit.splitlines() if line.startswith("ExecStart=")]
    started = time.monotonic()
    done = on_second(*shlex.split(exec_start), env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}, timeout=600)
    report.append(f"$ {exec_start}   (on h2: its boot unit's ExecStart, {time.monotonic() - started:.1f} s)")
    report.append("\n".join(line for line in done.stderr.splitlines() if "mounted" in line or "containers" in line))


def verify_second() -> tuple[int, str]:
    """./verify.sh e2en h2, run on h2."""
    cluster = parse_stack_config(config_of()).cluster
    with tempfile.NamedTemporaryFile("w", suffix=".env") as expected:
        expected.write(render_host_state(cluster, cluster.host_named("h2")))
        expected.flush()
        done = on_second(
            *INTERPRETER, script(HOST_FILES / "verify_host.sh"), "verify_host.sh", expected.name, check=False
        )
    return done.returncode, done.stdout + done.stderr


def wait_idle(nodes: list[str], seconds: int = 120) -> None:
    deadline = time.monotonic() + seconds
    while True:
        states = sh("sinfo", "-h", "-N", "-o", "%N %T", env=SLURM, check=False).stdout.split("\n")
        if {line.split()[0] for line in states if line.endswith(" idle")} >= set(nodes):
            return
        assert time.monotonic() < deadline, f"nodes not idle: {states}"
        time.sleep(2)


def test_one_cluster_on_two_hosts_through_a_jump_host(capsys):
    require_host()
    teardown_stack()
    assert not any(person_exists(user["name"]) for user in USERS), "people of the test exist already"
    before = snapshot()
    report: list[str] = []
    phases: list[str] = []
    clock = [time.monotonic()]

    def phase(name: str) -> None:
        now = time.monotonic()
        phases.append(f"{name} {now - clock[0]:.1f} s")
        clock[0] = now

    try:
        jump = ssh_hosts.start(JUMP)
        server = ssh_hosts.start(SECOND)
        # One private key for the host and its jump host (connection.bastion uses the host's).
        (JUMP.directory / "sshd" / "authorized_keys").write_text(
            (SECOND.directory / "sshd" / "client_key.pub").read_text()
        )
        sh("iptables", "-I", *BLOCK)
        secrets = {SECRET: server["client_key"]}
        key = SECOND.directory / "sshd" / "client_key"
        ssh = ["ssh", "-F", "/dev/null", "-i", str(key), "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no",
               "-o", "UserKnownHostsFile=/dev/null", "-o", "ConnectTimeout=5", "-o", "LogLevel=ERROR"]  # fmt: skip
        direct = sh(*ssh, f"root@{SECOND.address}", "true", check=False)
        jump_via = "ProxyCommand=" + shlex.join([*ssh, "-W", "%h:%p", f"root@{JUMP.address}"])
        through = sh(*ssh, "-o", jump_via, f"root@{SECOND.address}", "ip -4 -o addr show", check=False)
        report.append(
            f"$ ssh root@{SECOND.address} true   (from h1, direct)\nexit {direct.returncode}: {direct.stderr.strip()}\n"
            f"$ ssh -o 'ProxyCommand=ssh -W %h:%p root@{JUMP.address}' root@{SECOND.address} ip -4 -o addr show\n"
            + through.stdout
        )
        assert direct.returncode == 255 and "refused" in direct.stderr, direct
        assert through.returncode == 0 and SECOND.address in through.stdout, through

        # A jump host presenting another key than the pinned one: refused before any script runs.
        wrong = config_of(server["host_key"], PLACEHOLDER_KEY)
        wrong["cluster"]["hosts"][1]["connection"]["dial_error_limit"] = 2
        # Only the remote commands, run by the imitation (tests/harness/command_executor.py): the
        # engine applies whole programs, whose local commands would change h1 first.
        remote = [c for c in host_commands(run_program(wrong, stack=CLUSTER, secrets=secrets)) if c.connection]
        with pytest.raises(CommandFailedError) as refused:
            command_executor.up(command_executor.State(), remote)
        assert "e2en-h2-ssh-ready" in str(refused.value) and "Host key verification failed" in str(refused.value)
        assert not list((SECOND.directory / "sshd" / "sshd_config.d").iterdir()), "a script ran on h2"
        assert not Path(SECOND_STATE).exists()
        report.append("a wrong bastion host_key: " + str(refused.value).splitlines()[0] + " (proxy: host key refused)")
        phase("hosts and jump host")

        config = config_of(server["host_key"], jump["host_key"])
        commands = host_commands(run_program(config, stack=CLUSTER, secrets=secrets))
        assert all(c.connection["proxy"]["host"] == JUMP.address for c in commands if c.connection)
        on_h2 = {c.name for c in commands if c.connection}
        assert {f"{CLUSTER}-slurm-accounting-slurmdbd", f"{CLUSTER}-slurm-accounting-lxc"} <= on_h2
        state = State()
        started = time.monotonic()
        first, _ = up(state, commands)
        bring_up = first.finished(f"{CLUSTER}-health")
        phase("bring-up (2 hosts, 4 nodes, database on h2)")
        start = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() - 60))
        mounts(report)

        # A job script written once in the shared directory, run on the nodes of both hosts.
        script = Path(SHARED_DIR) / "hello.sh"
        script.write_text('#!/bin/sh\necho "$(hostname) sees $(ls /srv/gpucluster/e2en/shared | wc -l) files"\n')
        script.chmod(0o755)
        ran = "".join(sorted(srun("-N4", str(script)).splitlines(True)))
        report.append(f"$ srun -N4 {script}   (written once, on h1, in the shared directory)\n{ran}")
        assert [line.split()[0] for line in ran.splitlines()] == ["c000", "c001", "c002", "c003"]

        # A file written by a job on h1 is read by a job on h2.
        note = f"{SHARED_DIR}/from-c000.txt"
        srun("-w", "c000", "sh", "-c", f'echo "written by $(hostname) at $(date -u +%T)" > {note}')
        read = srun("-w", "c002", "sh", "-c", f'echo "$(hostname) reads: $(cat {note})"')
        on_h2 = on_second("cat", note).stdout
        served = Path(EXPORT_DIR, "from-c000.txt")
        report.append(
            f"$ srun -w c000 sh -c 'echo ... > {note}'   (h1)\n$ srun -w c002 sh -c 'cat {note}'   (h2)\n{read}"
            f"$ cat {note}   (on h2's host)\n{on_h2}$ ls -ln {served}   (the served directory on h1)\n"
            + sh("ls", "-ln", str(served)).stdout
        )
        assert read.startswith("c002 reads: written by c000") and on_h2.startswith("written by c000")
        assert served.stat().st_uid == 65534, "root of a node was not squashed"
        # A job's own NFS connection to the server: refused by its host's guard, on h1 (the
        # serving host: INPUT) and on h2 (FORWARD: it would leave masqueraded as h2).
        server = str(parse_stack_config(config).cluster.hosts[0].address)
        for node in ("c000", "c002"):
            answer = srun("-w", node, "python3", "-c", CONNECT, server, "2049").strip()
            report.append(f"$ srun -w {node} python3 -c <connect> {server} 2049\n{answer}")
            assert answer == "refused", (node, answer)
        phase("shared filesystem")

        # The database's container is on h2, not here; slurmctld (c000, h1) registered with it.
        assert not Path(f"/var/lib/lxc/{CLUSTER}-db").exists()
        assert (
            on_second("lxc-info", "-P", SECOND_DIRS["lxc_dir"], "-n", f"{CLUSTER}-db", "-s").stdout.split()[-1]
            == "RUNNING"
        )
        clusters = CLIENT.run("sacctmgr", "-nP", "show", "cluster", "format=cluster,controlhost")
        report.append("$ sacctmgr show cluster format=cluster,controlhost   (slurmdbd on h2)\n" + clusters)
        assert clusters.strip() == f"{CLUSTER}|10.53.3.2", clusters

        # Jobs on the nodes of both hosts, by two people of two accounts.
        CLIENT.as_user("dana", "srun", "-J", "mh-h1", "-w", "c000", "--gres=gpu:1", "true")
        CLIENT.as_user("dana", "srun", "-J", "mh-h2", "-w", "c002", "--gres=gpu:1", "true")
        CLIENT.as_user("erin", "srun", "-J", "mh-both", "-N2", "-w", "c001,c003", "--gres=gpu:1", "true")
        names = {"mh-h1", "mh-h2", "mh-both"}
        wait_for("the jobs' records in sacct", lambda: recorded(start, names, SLURM), 60)
        rows = {r["JobName"]: r for r in CLIENT.sacct_rows(start, SACCT_FORMAT)}
        assert [rows[n]["NodeList"] for n in ("mh-h1", "mh-h2", "mh-both")] == ["c000", "c002", "c[001,003]"]
        assert [(rows[n]["User"], rows[n]["Account"]) for n in ("mh-h1", "mh-h2", "mh-both")] == [
            ("dana", "physics"), ("dana", "physics"), ("erin", "chem"),
        ]  # fmt: skip
        assert [gpus_of(rows[n]["AllocTRES"]) for n in ("mh-h1", "mh-h2", "mh-both")] == [1, 1, 2]
        listing = CLIENT.run(
            "sacct", "-a", "-X", "-S", start, "--format=JobID,JobName,User,Account,NodeList,AllocTRES%40,State"
        )
        report.append(
            "$ sacct -a -X --format=JobID,JobName,User,Account,NodeList,AllocTRES,State   (on h1)\n" + listing
        )
        # h2's own Slurm client reads the same records.
        wait_for("the records from h2's client", lambda: recorded_on_second(start, names), 30)
        from_h2 = on_second(
            f"{SECOND_STATE}/bin/sacct", "-a", "-X", "-S", start, "--format=JobID,JobName,NodeList,AllocTRES%40"
        )
        report.append(f"$ {SECOND_STATE}/bin/sacct -a -X ...   (on h2)\n" + from_h2.stdout)

        # The limit holds across hosts: physics may hold one GPU; dana's job on h1 runs, her
        # job asking for a GPU on h2 waits for the account's GRES limit.
        running = CLIENT.submit("dana", "-J", "mh-runs-h1", "-w", "c000", "--gres=gpu:1", "--wrap", "sleep 120")
        wait_for("dana's job on h1 to run", lambda: CLIENT.job_state(running)[0] == "RUNNING", 60)
        held = CLIENT.submit("dana", "-J", "mh-held-h2", "-w", "c002", "--gres=gpu:1", "--wrap", "true")
        wait_for("dana's job on h2 to be held", lambda: CLIENT.job_state(held) == ("PENDING", "AssocGrpGRES"), 60)
        report.append(
            "$ squeue -o '%i %j %u %a %N %b %T %r'\n"
            + CLIENT.run("squeue", "-o", "%.5i %.11j %.5u %.8a %.5N %.10b %.8T %r")
        )
        CLIENT.run("scancel", running)
        wait_for(
            "the held job to run once the GPU is free",
            lambda: CLIENT.job_state(held)[0] in ("RUNNING", "COMPLETING", ""),
            60,
        )
        phase("accounting and the account limit")

        # A node of h2 whose GPU device disappears drains itself; it returns with the device.
        device = in_node_of_second("c002", "sh", "-c", "ls /dev/nvidia[0-9]*").stdout.split()[0]
        numbers = in_node_of_second("c002", "stat", "-c", "%t %T", device).stdout.split()
        in_node_of_second("c002", "sh", "-c", f"umount {device} && rm -f {device}")
        drained = wait_for(
            "c002 to drain",
            lambda: CLIENT.drained_by_health_check("c002"),
            3 * HEALTH_INTERVAL_S + 30,
        )
        assert CLIENT.node_state("c002")[1] == f"gpu-health: {device} missing"
        report.append(
            f"$ sinfo -R -o '%35E %9u %19H %N'   (stand-in {device} removed inside {CLUSTER}-c002, a node of h2)\n"
            + CLIENT.run("sinfo", "-R", "-o", "%35E %9u %19H %N")
        )
        refused = CLIENT.as_user("erin", "srun", "-w", "c002", "--immediate=5", "true", check=False)
        assert refused.returncode != 0, "a job ran on the drained node"
        major, minor = (str(int(n, 16)) for n in numbers)
        in_node_of_second("c002", "mknod", "-m", "0666", device, "c", major, minor)
        resumed = wait_for("c002 to return", lambda: CLIENT.node_state("c002")[0] == "idle", 3 * HEALTH_INTERVAL_S + 30)
        report.append("$ sinfo -N   (device back)\n" + CLIENT.run("sinfo", "-N"))
        phase(
            f"GPU health (HealthCheckInterval={HEALTH_INTERVAL_S}s: c002 drained {drained:.1f} s after its "
            f"device went, idle {resumed:.1f} s after it returned)"
        )

        # h2 reboots: its boot unit mounts the export again before its nodes start, and starts
        # the database's container before them; slurmctld on h1 reconnects to slurmdbd.
        reboot_second_host(report)
        mounts(report)
        wait_idle(["c002", "c003"])
        again = srun("-w", "c003", "cat", note)
        report.append(f"$ srun -w c003 cat {note}   (after h2's reboot)\n{again}")
        assert again.startswith("written by c000")
        CLIENT.as_user("erin", "srun", "-J", "after-reboot", "-w", "c002", "--gres=gpu:1", "true")
        wait_for("the job after the reboot in sacct", lambda: recorded(start, {"after-reboot"}, SLURM), 90)
        report.append(
            "$ sacct -a -X -S ... --name=after-reboot   (on h1, after h2's reboot)\n"
            + CLIENT.run(
                "sacct",
                "-a",
                "-X",
                "-S",
                start,
                "--name=after-reboot",
                "--format=JobID,JobName%12,User,Account,NodeList,AllocTRES%40,State",
            )
        )
        code, drifted = verify_second()
        report.append("$ ./verify.sh e2en h2   (on h2, after its boot unit)\n" + drifted.strip().splitlines()[-1])
        assert code == 0, drifted
        phase("h2's reboot and its return")

        removal = destroy_state(state)
        total = time.monotonic() - started
        phase("destroy")
        # The files stay where they were served from; nothing else of the cluster does.
        kept = sorted(p.name for p in Path(EXPORT_DIR).iterdir())
        report.append(f"after destroy: {EXPORT_DIR} holds {kept}; mounts on h1: "
                      f"{sh('findmnt', SHARED_DIR, check=False).returncode != 0 and 'none'}")  # fmt: skip
        assert kept == [".gpucluster-served", "from-c000.txt", "hello.sh"]  # the marker: made by the cluster
        assert sh("findmnt", SHARED_DIR, check=False).returncode != 0
        assert on_second("findmnt", SHARED_DIR, check=False).returncode != 0
        assert stand_in_clients() == [] and "ganesha" not in sh("ps", "-eo", "comm=").stdout
        assert not any(person_exists(user["name"]) for user in USERS)
        found = [line for line in leftovers(CLUSTER) if not line.startswith(f"path /srv/gpucluster/{CLUSTER} ")]
        assert found == []
        sh("rm", "-rf", EXPORT_DIR)  # as docs/hosts.md tells an operator who wants the data gone
    except BaseException:
        with capsys.disabled():  # what the NFS server and clients said, before teardown removes it
            for log in DIAGNOSTIC_LOGS:
                if Path(log).exists():
                    print(f"--- {log} (end)\n" + "\n".join(Path(log).read_text().splitlines()[-30:]))
            print("--- the report so far\n" + "\n".join(report) + "\n" + "; ".join(phases))
        raise
    finally:
        teardown_stack()

    assert leftovers(CLUSTER) == []
    assert not any(person_exists(user["name"]) for user in USERS)
    after = snapshot()
    assert after == before, {key: (before[key], after[key]) for key in before if before[key] != after[key]}
    with capsys.disabled():
        print("\n== one cluster on two hosts: shared filesystem served by h1, accounting database on h2, "
              "h2 only through a jump host ==")  # fmt: skip
        print("\n".join(report))
        print(f"bring-up {bring_up:.0f} s; destroy {removal.wall_seconds:.1f} s; cluster up to destroyed {total:.0f} s")
        print("phases: " + "; ".join(phases))
