"""End-to-end: job accounting and GPU health on a cluster of two hosts.

h1 is this machine (c000 with slurmctld, c001); h2 is a network namespace reached over SSH
(c002, c003) which also runs the accounting database (`accounting.host: h2`): slurmctld on
h1 and slurmdbd on h2 reach each other over the routes between the hosts' container subnets
(tests/harness/multihost_accounting.py). Jobs on the nodes of both hosts are in `sacct` with
their GPUs, seen from either host; an account limited to one GPU holds a job on h2 while its
job on h1 runs; a node of h2 whose GPU device disappears drains itself and comes back when
the device returns. Everything is removed in `finally`.
"""

import re
import subprocess
import time
from pathlib import Path

import pytest

from tests.harness import multihost_accounting as mha
from tests.harness import ssh_hosts
from tests.harness.command_executor import CommandFailedError, State, destroy_state, host_commands, up
from tests.harness.e2e_teardown import SECRET
from tests.harness.program_harness import run_program
from tests.test_e2e import host_snapshot, leftovers, require_host, sh, slurm_env

pytestmark = pytest.mark.e2e

CLUSTER = mha.CLUSTER
SLURM = slurm_env(CLUSTER)
H2_SLURM = {"SLURM_CONF": f"{mha.HOST2_DIRS['state_dir']}/{CLUSTER}/slurm.conf"}
H2_LXC = mha.HOST2_DIRS["lxc_dir"]
UIDS = {user["name"]: user["uid"] for user in mha.USERS}
SACCT_FORMAT = "JobID,JobName,User,Account,NodeList,AllocTRES,State"


def on_h2(*argv: str, check: bool = True, env: dict | None = None) -> subprocess.CompletedProcess:
    """A command run on h2 directly (its namespaces), to look or to act inside its nodes."""
    return sh(*ssh_hosts.host_argv(mha.HOST2), *argv, check=check, env=env)


def in_node_of_h2(node: str, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
    return on_h2("lxc-attach", "-P", H2_LXC, "-n", f"{CLUSTER}-{node}", "--", *argv, check=check)


def as_user(user: str, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
    """A Slurm command run by one of the cluster's people, from h1."""
    uid = UIDS[user]
    return subprocess.run(
        argv,
        user=uid,
        group=uid,
        extra_groups=[],
        cwd="/tmp",
        env={"PATH": "/usr/bin:/bin", "SLURM_CONF": SLURM["SLURM_CONF"], "LC_ALL": "C"},
        capture_output=True,
        text=True,
        timeout=180,
        check=check,
    )


def slurm(*argv: str, check: bool = True) -> str:
    return sh(*argv, env=SLURM, check=check).stdout


def wait_for(what: str, condition, seconds: float) -> float:
    started = time.monotonic()
    while not condition():
        assert time.monotonic() - started < seconds, f"timed out after {seconds}s waiting for {what}"
        time.sleep(0.5)
    return time.monotonic() - started


def sacct_rows(start: str, env: dict) -> list[dict]:
    out = sh("sacct", "-a", "-X", "-nP", "-S", start, f"--format={SACCT_FORMAT}", env=env, check=False)
    keys = SACCT_FORMAT.split(",")
    return [dict(zip(keys, line.split("|"), strict=True)) for line in out.stdout.splitlines() if line]


def gpus_of(tres: str) -> int:
    found = re.search(r"gres/gpu=(\d+)", tres)
    return int(found.group(1)) if found else 0


def job_state(job: str) -> tuple[str, str]:
    out = slurm("squeue", "-h", "-j", job, "-o", "%T|%r", check=False).strip()
    return tuple(out.split("|")) if out else ("", "")


def node_state(node: str) -> tuple[str, str]:
    state, reason = slurm("sinfo", "-h", "-N", "-n", node, "-o", "%T|%E").strip().split("|", 1)
    return state, reason


def submit(user: str, *options: str) -> str:
    return as_user(user, "sbatch", "--parsable", "--chdir=/tmp", *options).stdout.strip()


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


def test_accounting_and_gpu_health_across_two_hosts(capsys, kept_images_purged):
    require_host()
    kept_images_purged.add(CLUSTER)
    mha.teardown()
    assert not any(person_exists(user["name"]) for user in mha.USERS), "people of the test exist already"
    before = snapshot()
    report: list[str] = []
    timings: list[str] = []
    state = State()
    try:
        server = ssh_hosts.start(mha.HOST2)
        Path(mha.SHARED_DIR).mkdir(parents=True, exist_ok=True)
        run = run_program(mha.config(server["host_key"]), stack=mha.STACK, secrets={SECRET: server["client_key"]})
        commands = host_commands(run)
        on_second = {c.name for c in commands if c.connection}
        assert {f"{CLUSTER}-slurm-accounting-slurmdbd", f"{CLUSTER}-slurm-accounting-lxc"} <= on_second

        started = time.monotonic()
        first, _ = up(state, commands)
        timings.append(f"bring-up (2 hosts, 4 nodes, database on h2): {time.monotonic() - started:.1f} s")
        slowest = sorted(first.steps, key=lambda s: -s.seconds)[:5]
        timings.append("slowest creates: " + ", ".join(f"{s.name} {s.seconds:.1f}s" for s in slowest))
        start = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() - 60))

        # The database's container is on h2, not here; slurmctld (c000, h1) registered with it.
        assert not Path(f"/var/lib/lxc/{CLUSTER}-db").exists()
        assert on_h2("lxc-info", "-P", H2_LXC, "-n", f"{CLUSTER}-db", "-s").stdout.split()[-1] == "RUNNING"
        clusters = slurm("sacctmgr", "-nP", "show", "cluster", "format=cluster,controlhost")
        report.append("$ sacctmgr show cluster format=cluster,controlhost   (slurmdbd on h2)\n" + clusters)
        assert clusters.strip() == f"{CLUSTER}|10.56.3.2", clusters

        # Jobs on the nodes of both hosts, by two people of two accounts.
        as_user("dana", "srun", "-J", "mh-h1", "-w", "c000", "--gres=gpu:1", "true")
        as_user("dana", "srun", "-J", "mh-h2", "-w", "c002", "--gres=gpu:1", "true")
        as_user("erin", "srun", "-J", "mh-both", "-N2", "-w", "c001,c003", "--gres=gpu:1", "true")
        names = {"mh-h1", "mh-h2", "mh-both"}

        def recorded(env: dict) -> bool:
            rows = [r for r in sacct_rows(start, env) if r["JobName"] in names]
            return len(rows) == len(names) and all(r["State"] == "COMPLETED" for r in rows)

        wait_for("the jobs' records in sacct", lambda: recorded(SLURM), 60)
        rows = {r["JobName"]: r for r in sacct_rows(start, SLURM)}
        assert [rows[n]["NodeList"] for n in ("mh-h1", "mh-h2", "mh-both")] == ["c000", "c002", "c[001,003]"]
        assert [(rows[n]["User"], rows[n]["Account"]) for n in ("mh-h1", "mh-h2", "mh-both")] == [
            ("dana", "physics"), ("dana", "physics"), ("erin", "chem"),
        ]  # fmt: skip
        assert [gpus_of(rows[n]["AllocTRES"]) for n in ("mh-h1", "mh-h2", "mh-both")] == [1, 1, 2]
        listing = slurm(
            "sacct", "-a", "-X", "-S", start, "--format=JobID,JobName,User,Account,NodeList,AllocTRES%40,State"
        )
        report.append(
            "$ sacct -a -X --format=JobID,JobName,User,Account,NodeList,AllocTRES,State   (on h1)\n" + listing
        )
        # h2's own Slurm client reads the same records.
        wait_for("the records from h2's client", lambda: recorded(H2_SLURM), 30)
        from_h2 = on_h2("sacct", "-a", "-X", "-S", start, "--format=JobID,JobName,NodeList,AllocTRES%40", env=H2_SLURM)
        report.append(f"$ SLURM_CONF={H2_SLURM['SLURM_CONF']} sacct -a -X ...   (on h2)\n" + from_h2.stdout)

        # The limit holds across hosts: physics may hold one GPU; dana's job on h1 runs, her
        # job asking for a GPU on h2 waits for the account's GRES limit.
        running = submit("dana", "-J", "mh-runs-h1", "-w", "c000", "--gres=gpu:1", "--wrap", "sleep 120")
        wait_for("dana's job on h1 to run", lambda: job_state(running)[0] == "RUNNING", 60)
        held = submit("dana", "-J", "mh-held-h2", "-w", "c002", "--gres=gpu:1", "--wrap", "true")
        wait_for("dana's job on h2 to be held", lambda: job_state(held) == ("PENDING", "AssocGrpGRES"), 60)
        report.append(
            "$ squeue -o '%i %j %u %a %N %b %T %r'\n" + slurm("squeue", "-o", "%.5i %.11j %.5u %.8a %.5N %.10b %.8T %r")
        )
        slurm("scancel", running)
        wait_for(
            "the held job to run once the GPU is free", lambda: job_state(held)[0] in ("RUNNING", "COMPLETING", ""), 60
        )

        # A node of h2 whose GPU device disappears drains itself; it returns with the device.
        device = in_node_of_h2("c002", "sh", "-c", "ls /dev/nvidia[0-9]*").stdout.split()[0]
        numbers = in_node_of_h2("c002", "stat", "-c", "%t %T", device).stdout.split()
        in_node_of_h2("c002", "sh", "-c", f"umount {device} && rm -f {device}")
        drained = wait_for(
            "c002 to drain",
            lambda: node_state("c002")[0].startswith("drain") and node_state("c002")[1].startswith("gpu-health:"),
            3 * mha.HEALTH_INTERVAL_S + 30,
        )
        assert node_state("c002")[1] == f"gpu-health: {device} missing"
        report.append(
            f"$ sinfo -R   (stand-in {device} removed inside {CLUSTER}-c002, a node of h2)\n" + slurm("sinfo", "-R")
        )
        refused = as_user("erin", "srun", "-w", "c002", "--immediate=5", "true", check=False)
        assert refused.returncode != 0, "a job ran on the drained node"
        major, minor = (str(int(n, 16)) for n in numbers)
        in_node_of_h2("c002", "mknod", "-m", "0666", device, "c", major, minor)
        resumed = wait_for("c002 to return", lambda: node_state("c002")[0] == "idle", 3 * mha.HEALTH_INTERVAL_S + 30)
        report.append("$ sinfo -N   (device back)\n" + slurm("sinfo", "-N"))
        timings.append(
            f"HealthCheckInterval={mha.HEALTH_INTERVAL_S}s: c002 (h2) drained {drained:.1f} s after its device "
            f"went, idle {resumed:.1f} s after it returned"
        )

        started = time.monotonic()
        destroy_state(state)
        timings.append(f"destroy: {time.monotonic() - started:.1f} s")
    finally:
        try:
            destroy_state(state)
        except CommandFailedError as error:
            print(f"destroy failed: {error}")
        mha.teardown()

    with capsys.disabled():
        print("\n== accounting and GPU health on two hosts (database on h2, slurmctld in c000 on h1) ==")
        print("\n".join(report))
        print("\n".join(timings))
    assert leftovers(CLUSTER) == []
    assert not any(person_exists(user["name"]) for user in mha.USERS)
    after = snapshot()
    assert after == before, {key: (before[key], after[key]) for key in before if before[key] != after[key]}
