"""End-to-end: job accounting, per-account GPU limits and the GPU health check, on this machine.

A two-node cluster (the `e2e` stack, accounting variant: tests/harness/e2e_teardown.py) is
brought up with MariaDB and slurmdbd in their own container, three people and two accounts.
Jobs of several people and accounts run, then: sacct lists them with user, account, elapsed
time and GPUs; an account limited to one GPU holds a two-GPU job while another account's job
runs; slurmdbd killed during a job loses no record; a node whose GPU device disappears drains
itself and comes back when it returns; changed accounts are applied (and applied again,
changing nothing); an account with jobs is not removed; destroy keeps a dump of the database
and a new cluster restores it. Everything is removed in `finally`.

Its login node: alice logs in over SSH through the host's forward with her key (generated
here), submits a GPU job from her directory in shared_dir and reads its output; bob, logged in
with his key, cannot read it; root and passwords are refused.
"""

import copy
import os
import subprocess
import time
from pathlib import Path

import pytest

from tests.harness.e2e_teardown import (
    ACCOUNTING_USERS,
    HEALTH_INTERVAL_S,
    LOGIN,
    STACK,
    accounting_config,
    remove_kept_accounting,
    teardown,
)
from tests.harness.engine_cluster import CommandFailedError, State, destroy_state, host_commands, up
from tests.harness.login_node import (
    links_steered_nothing,
    login_keys,
    login_node_serves_people,
    people_plant_links,
    person_in_login,
    public_keys,
    ssh_as,
    watched_state,
)
from tests.harness.program_harness import run_program
from tests.harness.slurm_client import SlurmClient, gpus_of, wait_for
from tests.test_e2e import leftovers, require_host, sh, slurm_env
from tests.test_e2e_lifecycle import run_verify, simulate_reboot

pytestmark = pytest.mark.e2e

CLUSTER = "e2e"
SLURM = slurm_env(CLUSTER)
DB = f"{CLUSTER}-db"
KEPT_DUMP = Path(f"/var/cache/gpucluster/{CLUSTER}/accounting/slurm_acct_db.sql.gz")
PASSWORD_FILE = Path(f"/var/lib/gpucluster/{CLUSTER}/accounting/db-password")
UIDS = {user["name"]: user["uid"] for user in ACCOUNTING_USERS}
LOGIN_MEMORY_MB = 2048  # login.memory_mb's default
SACCT_FORMAT = "JobID,JobName,User,Account,Elapsed,ElapsedRaw,AllocTRES,State"


def commands(config: dict):
    return host_commands(run_program(config, stack=STACK))


def outputs(config: dict) -> dict:
    return run_program(config, stack=STACK).outputs


def changed(actions: dict[str, str]) -> dict[str, str]:
    return {name: action for name, action in actions.items() if action != "same"}


CLIENT = SlurmClient(SLURM, UIDS)  # Slurm commands, as root or as the cluster's people


def sacct_rows(start: str) -> list[dict]:
    return CLIENT.sacct_rows(start, SACCT_FORMAT)


def associations() -> set[tuple[str, str, str, str, str]]:
    """(account, user, GrpTRES, QOS, DefaultQOS) of every association of the cluster."""
    out = CLIENT.run(
        "sacctmgr", "-nP", "show", "assoc", f"cluster={CLUSTER}", "format=account,user,grptres,qos,defaultqos"
    )
    rows = set()
    for line in out.splitlines():
        account, user, tres, qos, default = line.split("|")
        rows.add((account, user, tres, ",".join(sorted(filter(None, qos.split(",")))), default))
    return rows


def expected_associations(config: dict) -> set[tuple[str, str, str, str, str]]:
    """What sacctmgr must show for the config: Slurm's root account and root user, then each
    account and each member, members inheriting the account's QOS and default QOS."""
    rows = {("root", "", "", "normal", ""), ("root", "root", "", "normal", "")}
    for account in config["cluster"]["accounting"]["accounts"]:
        tres = f"gres/gpu={account['gpus']}" if account.get("gpus") is not None else ""
        qos = ",".join(sorted(account.get("qos") or ["normal"]))
        default = account.get("default_qos") or ""
        rows.add((account["name"], "", tres, qos, default))
        rows |= {(account["name"], user, "", qos, default) for user in account.get("users", [])}
    return rows


def default_accounts() -> dict[str, str]:
    out = CLIENT.run("sacctmgr", "-nP", "show", "user", "format=user,defaultaccount")
    return dict(line.split("|") for line in out.splitlines() if line)


def transactions() -> int:
    return len(CLIENT.run("sacctmgr", "-nP", "list", "transactions").splitlines())


def run_again(state: State, name: str) -> None:
    """Run a command's create again, as a second `pulumi up` after a lost state would."""
    entry = next(entry for entry in state.resources.values() if entry.command.name == name)
    command = entry.command
    subprocess.run(
        [*command.interpreter, command.create],
        env={**os.environ, **command.environment},
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )


def person_ids(name: str, container: str | None = None) -> str:
    argv = ["getent", "passwd", name]
    if container:
        argv = ["lxc-attach", "-n", container, "--", *argv]
    line = sh(*argv, check=False).stdout.strip()
    return ":".join(line.split(":")[2:4]) if line else ""


def test_accounting_limits_health_and_restore(capsys, tmp_path):
    require_host()
    teardown()
    people_before = {user["name"]: person_ids(user["name"]) for user in ACCOUNTING_USERS}
    assert not any(people_before.values()), f"people of the test exist on the host already: {people_before}"
    report: list[str] = []
    timings: list[str] = []
    state, restored_state = State(), State()
    keys = login_keys(tmp_path)
    config = accounting_config(login_keys=public_keys(keys))
    try:
        started = time.monotonic()
        first, _ = up(state, commands(config))
        timings.append(f"bring-up (2 nodes, database container, accounts): {time.monotonic() - started:.1f} s")
        slowest = sorted(first.steps, key=lambda s: -s.seconds)[:5]
        timings.append("slowest creates: " + ", ".join(f"{s.name} {s.seconds:.1f}s" for s in slowest))
        start = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() - 60))

        # The secret: a 0400 root file on the host, slurmdbd.conf 0600 slurm in the container,
        # never in a command line, a command's input or its output.
        assert sh("stat", "-c", "%a %U", str(PASSWORD_FILE)).stdout.split() == ["400", "root"]
        password = PASSWORD_FILE.read_text().strip()
        assert len(password) == 32
        dbd_conf = sh("lxc-attach", "-n", DB, "--", "stat", "-c", "%a %U", "/etc/slurm/slurmdbd.conf").stdout
        assert dbd_conf.split() == ["600", "slurm"]
        assert password not in sh("ps", "-eo", "args=").stdout
        for entry in state.resources.values():
            assert password not in f"{entry.command.environment}{entry.stdout}{entry.stderr}", entry.command.name

        # People: the same ids on the host, in every node and in the database's container.
        for user in ACCOUNTING_USERS:
            ids = f"{user['uid']}:{user['gid']}"
            for container in (None, f"{CLUSTER}-c000", f"{CLUSTER}-c001", DB):
                assert person_ids(user["name"], container) == ids, (user, container)

        # The login node: a person submits a GPU job from shared_dir and reads its output; another cannot.
        login_node_serves_people(keys, config["cluster"]["host"]["shared_dir"], report)

        # What people write steers nothing root does: their ~/.ssh made links to /etc, to another
        # person's home and to another's directory in shared_dir, and a link in shared_dir where a
        # person's directory would be made; then the setup runs again (a key added): nothing
        # outside their own files changes owner, mode or content, and they still log in.
        shared = config["cluster"]["host"]["shared_dir"]
        login = f"{CLUSTER}-{LOGIN['name']}"
        people_plant_links(login, shared)
        before = watched_state(login, shared)
        (tmp_path / "added").mkdir()
        added = login_keys(tmp_path / "added")
        keys_now = {**public_keys(keys), "alice": [public_keys(keys)["alice"], public_keys(added)["alice"]]}
        config = accounting_config(login_keys=keys_now)
        _, actions = up(state, commands(config))
        assert changed(actions) == {f"{CLUSTER}-login-setup": "update"}, changed(actions)
        links_steered_nothing(login, shared, before)
        for key in (keys["alice"], added["alice"]):
            assert ssh_as(key, "alice", "id -un").stdout.strip() == "alice"
        report.append("links in homes and shared_dir, then the login setup again: nothing outside them changed")

        # The accounts are the config's, exactly.
        assert associations() == expected_associations(config)
        assert default_accounts()["alice"] == "physics" and default_accounts()["bob"] == "chem"

        # Jobs of several people and accounts.
        CLIENT.as_user("alice", "srun", "-J", "acct-alice-physics", "--gres=gpu:1", "sleep", "2")
        CLIENT.as_user("bob", "srun", "-J", "acct-bob-chem", "--gres=gpu:1", "sleep", "3")
        CLIENT.as_user("alice", "srun", "-A", "chem", "-J", "acct-alice-chem-2gpu", "-N2", "--gres=gpu:1", "sleep", "2")
        names = {"acct-alice-physics", "acct-bob-chem", "acct-alice-chem-2gpu"}

        def finished(wanted: set[str]) -> bool:
            rows = [r for r in sacct_rows(start) if r["JobName"] in wanted]
            return len(rows) == len(wanted) and all(r["State"] in {"COMPLETED", "CANCELLED by 0"} for r in rows)

        wait_for("the jobs' records in sacct", lambda: finished(names), 60)
        listing = CLIENT.run(
            "sacct", "-a", "-X", "-S", start, "--format=JobID,JobName%22,User,Account,Elapsed,AllocTRES%45,State"
        )
        report.append("$ sacct -a -X --format=JobID,JobName,User,Account,Elapsed,AllocTRES,State\n" + listing)
        rows = {r["JobName"]: r for r in sacct_rows(start)}
        assert (rows["acct-alice-physics"]["User"], rows["acct-alice-physics"]["Account"]) == ("alice", "physics")
        assert (rows["acct-bob-chem"]["User"], rows["acct-bob-chem"]["Account"]) == ("bob", "chem")
        assert (rows["acct-alice-chem-2gpu"]["User"], rows["acct-alice-chem-2gpu"]["Account"]) == ("alice", "chem")
        assert [gpus_of(rows[name]["AllocTRES"]) for name in sorted(names)] == [2, 1, 1]
        assert all(int(rows[name]["ElapsedRaw"]) >= 2 for name in names)

        # GPU usage per account, from sacct: GPU-seconds = GPUs x elapsed seconds.
        usage: dict[str, int] = {}
        for row in sacct_rows(start):
            usage[row["Account"]] = usage.get(row["Account"], 0) + gpus_of(row["AllocTRES"]) * int(row["ElapsedRaw"])
        report.append(
            "GPU-seconds per account (sacct AllocTRES gres/gpu x ElapsedRaw):\n"
            + "\n".join(f"  {account:10} {seconds}" for account, seconds in sorted(usage.items()))
        )
        assert usage["physics"] >= 2 and usage["chem"] >= 3 + 2 * 2

        # Memory use, gathered from the job's cgroup: sacct has the step's MaxRSS.
        hold = "x = bytearray(150 * 1024 * 1024); x[::4096] = b'1' * len(x[::4096]); import time; time.sleep(2)"
        # Sampled every second (the cluster's default is every 30 s; a job shorter than that is
        # sampled at its start only, before it holds anything).
        CLIENT.as_user("bob", "srun", "-J", "acct-bob-rss", "--mem=400", "--acctg-freq=task=1", "python3", "-c", hold)

        def steps_rss() -> str:
            """The job's steps with their MaxRSS (the allocation's own row has none)."""
            job = CLIENT.run("sacct", "-a", "-X", "-n", "-P", "-S", start, "--name=acct-bob-rss", "--format=JobID")
            job = job.split()[0] if job.split() else ""
            return CLIENT.run("sacct", "-a", "-n", "-P", "-j", job, "--format=JobID,MaxRSS") if job else ""

        def max_rss_mb() -> float:
            sizes = [row.split("|")[1] for row in steps_rss().splitlines() if row.count("|") == 1 and row.split("|")[1]]
            scale = {"K": 1 / 1024, "M": 1, "G": 1024}
            return max((float(s[:-1]) * scale[s[-1]] if s[-1] in scale else float(s) / 2**20 for s in sizes), default=0)

        try:
            wait_for("the MaxRSS of bob's job in sacct", lambda: max_rss_mb() > 0, 60)
        except AssertionError as error:
            raise AssertionError(f"{error}; sacct -j: {steps_rss()!r}") from None
        report.append(f"sacct MaxRSS of a job holding 150 MB: {max_rss_mb():.0f} MB")
        assert 140 <= max_rss_mb() <= 400, steps_rss()

        # The limit: physics may hold 1 GPU; alice asking for 2 at once is held with the
        # association's GRES limit as the reason, while bob's chem job runs.
        running = CLIENT.submit(
            "bob", "-J", "acct-bob-runs", "-A", "chem", "-w", "c001", "--gres=gpu:1", "--wrap", "sleep 120"
        )
        wait_for("bob's job to run", lambda: CLIENT.job_state(running)[0] == "RUNNING", 60)
        held = CLIENT.submit("alice", "-J", "acct-alice-2gpu", "-A", "physics", "-N2", "--gres=gpu:1", "--wrap", "true")
        wait_for("alice's job to be held", lambda: CLIENT.job_state(held) == ("PENDING", "AssocGrpGRES"), 60)
        assert CLIENT.job_state(running)[0] == "RUNNING"
        report.append(
            "$ squeue -o '%i %j %u %a %b %T %r'\n" + CLIENT.run("squeue", "-o", "%.6i %.16j %.6u %.8a %.14b %.8T %r")
        )
        CLIENT.run("scancel", held)

        # The login node's memory is its own: a person past it is ended there, alone; bob's job on
        # a node runs on, and she logs in again.
        limit_mb = LOGIN_MEMORY_MB
        hog = person_in_login(
            login, "alice", f"python3 -c 'x = b\"x\" * ({limit_mb} + 512) * 2**20; print(len(x))'", check=False
        )
        report.append(f"alice allocates {limit_mb + 512} MB on the login node ({limit_mb} MB): exit {hog.returncode}")
        assert hog.returncode in (137, -9), hog
        assert CLIENT.job_state(running)[0] == "RUNNING", "bob's job ended with alice's allocation"
        assert ssh_as(keys["alice"], "alice", "id -un").stdout.strip() == "alice"

        # slurmdbd killed while bob's job runs: jobs keep running and starting; their records
        # arrive once slurmdbd is back (slurmctld keeps them meanwhile).
        sh("lxc-attach", "-n", DB, "--", "systemctl", "kill", "-s", "KILL", "slurmdbd")
        wait_for(
            "slurmdbd to die",
            lambda: sh("lxc-attach", "-n", DB, "--", "pidof", "slurmdbd", check=False).returncode != 0,
            30,
        )
        CLIENT.as_user("alice", "srun", "-J", "acct-while-dbd-down", "-w", "c000", "--gres=gpu:1", "true")
        assert CLIENT.job_state(running)[0] == "RUNNING", "bob's job died with slurmdbd"
        code, drift = run_verify(config)
        assert code == 1 and f"WRONG    slurmdbd active in {DB}" in drift, drift
        assert sh("sacct", "-a", "-X", "-n", "-S", start, env=SLURM, check=False).returncode != 0, (
            "sacct answered without slurmdbd"
        )
        CLIENT.run("scancel", running)
        wait_for("bob's job to end", lambda: CLIENT.job_state(running)[0] == "", 60)
        sh("lxc-attach", "-n", DB, "--", "systemctl", "start", "slurmdbd")
        back = wait_for(
            "the records kept while slurmdbd was down",
            lambda: (
                {"acct-while-dbd-down", "acct-bob-runs"}
                <= {r["JobName"] for r in sacct_rows(start) if r["State"] != "RUNNING"}
            ),
            120,
        )
        rows = {r["JobName"]: r for r in sacct_rows(start)}
        assert rows["acct-while-dbd-down"]["State"] == "COMPLETED" and rows["acct-bob-runs"]["State"].startswith(
            "CANCELLED"
        )
        timings.append(f"records of the jobs run while slurmdbd was down in sacct {back:.1f} s after it restarted")

        # A node whose GPU device disappears drains itself with the reason, and comes back
        # when the device is there again.
        sh("lxc-attach", "-n", f"{CLUSTER}-c001", "--", "sh", "-c", "umount /dev/nvidia1 && rm -f /dev/nvidia1")
        drained = wait_for(
            "c001 to drain",
            lambda: CLIENT.drained_by_health_check("c001"),
            3 * HEALTH_INTERVAL_S + 30,
        )
        assert CLIENT.node_state("c001")[1] == "gpu-health: /dev/nvidia1 missing"
        report.append("$ sinfo -R   (stand-in /dev/nvidia1 removed in e2e-c001)\n" + CLIENT.run("sinfo", "-R"))
        refused = CLIENT.as_user(
            "alice", "srun", "-w", "c001", "--immediate=5", "--gres=gpu:1", "true", check=False, timeout=60
        )
        assert refused.returncode != 0, "a job ran on the drained node"
        sh("lxc-attach", "-n", f"{CLUSTER}-c001", "--", "mknod", "-m", "0666", "/dev/nvidia1", "c", "195", "1")
        resumed = wait_for("c001 to return", lambda: CLIENT.node_state("c001")[0] == "idle", 3 * HEALTH_INTERVAL_S + 30)
        report.append("$ sinfo -N   (device back)\n" + CLIENT.run("sinfo", "-N"))
        timings.append(
            f"HealthCheckInterval={HEALTH_INTERVAL_S}s: drained {drained:.1f} s after the device went, "
            f"back to idle {resumed:.1f} s after it returned"
        )

        # A reboot: the boot unit's ExecStart brings back the database's container first;
        # slurmdbd, slurmctld and slurmd are units in the containers; records keep arriving.
        def after_boot(_config, _outputs, boot_report):
            CLIENT.as_user("bob", "srun", "-J", "acct-after-boot", "--gres=gpu:1", "true")
            wait_for("the job after the reboot in sacct", lambda: finished({"acct-after-boot"}), 60)
            boot_report.append("sacct after the reboot: " + ", ".join(r["JobName"] for r in sacct_rows(start)))

        simulate_reboot(config, outputs(config), report, check=after_boot)

        # Changed accounts: only the accounts command runs, and sacctmgr then shows the new
        # config exactly; running it again changes nothing in the database.
        changed_config = accounting_config(changed=True, login_keys=keys_now)
        started = time.monotonic()
        _, actions = up(state, commands(changed_config))
        timings.append(f"apply changed accounts: {time.monotonic() - started:.1f} s")
        assert changed(actions) == {f"{CLUSTER}-accounts-apply": "update"}, changed(actions)
        assert associations() == expected_associations(changed_config)
        assert default_accounts()["bob"] == "bio" and default_accounts()["carol"] == "bio"
        qos = CLIENT.run("sacctmgr", "-nP", "show", "qos", "short", "format=name,priority,maxtrespu,maxwall").strip()
        assert qos == "short|20|gres/gpu=1|1-00:00:00", qos
        before = transactions()
        run_again(state, f"{CLUSTER}-accounts-apply")
        assert transactions() == before, "applying the same accounts again changed the database"
        report.append(
            "$ sacctmgr show assoc format=account,user,grptres,qos,defaultqos   (after the change)\n"
            + CLIENT.run("sacctmgr", "show", "assoc", "format=account,user,grptres,qos%20,defaultqos")
        )

        # An account removed from the config while it has a job stays, and the apply says why.
        job = CLIENT.submit("alice", "-J", "acct-alice-keeps", "-A", "physics", "--wrap", "sleep 300")
        wait_for("alice's job to run", lambda: CLIENT.job_state(job)[0] == "RUNNING", 60)
        without_physics = copy.deepcopy(changed_config)
        accounts = without_physics["cluster"]["accounting"]["accounts"]
        accounts[:] = [account for account in accounts if account["name"] != "physics"]
        with pytest.raises(CommandFailedError, match=r"with jobs, so not removed: account physics \(jobs "):
            up(state, commands(without_physics))  # a failed update keeps the old state
        assert associations() == expected_associations(changed_config), "a busy account was touched"
        CLIENT.run("scancel", job)

        # Destroy keeps a dump of the database and says where.
        job_names = {r["JobName"] for r in sacct_rows(start)}
        started = time.monotonic()
        removal = destroy_state(state)
        timings.append(f"destroy (with the dump): {time.monotonic() - started:.1f} s")
        del removal
        assert KEPT_DUMP.exists() and sh("stat", "-c", "%a", str(KEPT_DUMP)).stdout.strip() == "600"
        assert [p for p in leftovers(CLUSTER) if "/var/cache/gpucluster/e2e/accounting" not in p] == []
        assert {user["name"]: person_ids(user["name"]) for user in ACCOUNTING_USERS} == people_before
        assert not Path("/var/lib/gpucluster-host/people").exists()

        # A new cluster restores it: the earlier jobs are in sacct again.
        restored = accounting_config(changed=True, restore=True)
        started = time.monotonic()
        up(restored_state, commands(restored))
        timings.append(f"re-create with restore: {time.monotonic() - started:.1f} s")
        again = {r["JobName"] for r in sacct_rows(start)}
        assert job_names <= again, job_names - again
        # New jobs are numbered after the restored ones: none hides an old record.
        last = max(int(r["JobID"]) for r in sacct_rows(start) if r["JobName"] in job_names)
        CLIENT.as_user("carol", "srun", "-J", "acct-carol-restored", "--gres=gpu:1", "true")
        wait_for("carol's job in sacct", lambda: finished({"acct-carol-restored"}), 60)
        rows = {r["JobName"]: r for r in sacct_rows(start)}
        assert int(rows["acct-carol-restored"]["JobID"]) > last and job_names <= set(rows)
        assert associations() == expected_associations(restored)
        report.append(
            "$ sacct -a -X   (a new cluster, restored from the kept dump)\n"
            + CLIENT.run("sacct", "-a", "-X", "-S", start, "--format=JobID,JobName%22,User,Account,Elapsed,State")
        )
    finally:
        for leftover in (restored_state, state):
            try:
                destroy_state(leftover)
            except CommandFailedError as error:
                print(f"destroy failed: {error}")
        teardown()
        remove_kept_accounting()

    assert leftovers(CLUSTER) == []
    assert {user["name"]: person_ids(user["name"]) for user in ACCOUNTING_USERS} == people_before
    with capsys.disabled():
        print("\n" + "\n".join(report))
        print("\n".join(timings))
