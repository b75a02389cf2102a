"""End-to-end: `./status.sh` on a real cluster (the `e2e` stack's accounting variant, two nodes
with one stand-in GPU each, a price per GPU-hour on the host). A GPU job runs on c000, another
waits for that GPU, c001 is drained by hand, a GPU job has finished: `status --json` shows the
running job, the waiting one with Slurm's reason, the drained node with its reason, and the
finished job's cost is its elapsed time x its GPUs x the price, to the micro-dollar. The text
view says the same. Everything is removed in `finally`."""

import json
import os
import subprocess
import time
from decimal import Decimal
from pathlib import Path

import pytest
import yaml

from components.composition.stack_config import parse_stack_config
from ops import status
from ops.cost import job_cost
from tests.harness import ssh_hosts
from tests.harness.e2e_teardown import (
    SECRET,
    SSH_HOST,
    STACK,
    accounting_config,
    one_ssh_host_config,
    remove_kept_accounting,
    teardown,
)
from tests.harness.engine_cluster import CommandFailedError, State, destroy_state, host_commands, up
from tests.harness.program_harness import run_program
from tests.harness.slurm_client import wait_for
from tests.test_e2e import leftovers, require_host
from tests.test_e2e_accounting import CLIENT, sacct_rows

pytestmark = pytest.mark.e2e

CLUSTER = "e2e"
PRICE = "3.6"  # USD per GPU-hour: one GPU-second costs $0.001
ROOT = Path(__file__).resolve().parents[1]
DRAIN_REASON = "status e2e check"


def run_status(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(ROOT / "status.sh"), STACK, *args],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_status_shows_jobs_reasons_drain_and_cost(tmp_path, capsys):
    require_host()
    teardown()
    report: list[str] = []
    state = State()
    config = accounting_config()
    config["cluster"]["host"]["gpu_hour_price"] = float(PRICE)
    try:
        up(state, host_commands(run_program(config, stack=STACK)))
        start = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() - 60))
        outputs = tmp_path / "outputs.json"
        outputs.write_text(json.dumps(run_program(config, stack=STACK).outputs, default=str))
        stack_file = tmp_path / "Pulumi.e2e.yaml"
        stack_file.write_text(yaml.safe_dump({"config": {"gpu-cluster:cluster": config["cluster"]}}))
        env = {"STATUS_OUTPUTS": str(outputs), "STATUS_STACK_FILE": str(stack_file)}

        # A finished GPU job (alice, physics), a running one (bob, chem) holding c000's GPU,
        # and one waiting for that GPU.
        CLIENT.as_user("alice", "srun", "-J", "status-done", "-w", "c001", "--gres=gpu:1", "sleep", "3")
        on_c000 = ("-A", "chem", "-w", "c000", "--gres=gpu:1")
        running = CLIENT.submit("bob", "-J", "status-runs", *on_c000, "--wrap", "sleep 300")
        wait_for("the GPU job to run", lambda: CLIENT.job_state(running)[0] == "RUNNING", 60)
        waiting = CLIENT.submit("bob", "-J", "status-waits", *on_c000, "--wrap", "true")
        wait_for("the second GPU job to wait", lambda: CLIENT.job_state(waiting) == ("PENDING", "Resources"), 60)
        CLIENT.run("scontrol", "update", "nodename=c001", "state=drain", f"reason={DRAIN_REASON}")

        # status' cost reads sacct: wait until slurmdbd has the finished job's end and the
        # running job's start (slurmctld sends them on; under load that can take seconds).
        def in_sacct() -> bool:
            rows = sacct_rows(start)
            done = any(r["JobName"] == "status-done" and r["State"] == "COMPLETED" for r in rows)
            return done and any(r["JobID"] == running and r["State"] == "RUNNING" for r in rows)

        wait_for("the finished job's end and the running job's start in sacct", in_sacct, 60)
        done = next(r for r in sacct_rows(start) if r["JobName"] == "status-done")
        report.append("$ scontrol -o show node\n" + CLIENT.run("scontrol", "-o", "show", "node"))
        report.append("$ scontrol -o show job\n" + CLIENT.run("scontrol", "-o", "show", "job"))
        report.append(
            "$ sacct -a -X -nP --format=JobID,User,Account,State,ElapsedRaw,AllocTRES,NodeList\n"
            + CLIENT.run(
                "sacct",
                "-a",
                "-X",
                "-nP",
                "-S",
                start,
                "--format=JobID,User,Account,State,ElapsedRaw,AllocTRES,NodeList",
            )
        )

        as_json = run_status(env, "--json")
        assert as_json.returncode == 0, as_json.stdout + as_json.stderr
        status = json.loads(as_json.stdout)
        assert status["stack_up"] and status["problems"] == []
        assert [(h["name"], h["reachable"], h["drift"]) for h in status["hosts"]] == [("local", True, [])]
        assert status["web_url"] == ""  # the accounting variant has no web app
        jobs = {job["job_id"]: job for job in status["queue"]["jobs"]}
        assert (jobs[running]["state"], jobs[running]["nodes"], jobs[running]["gpus"]) == ("RUNNING", ["c000"], 1)
        assert (jobs[waiting]["state"], jobs[waiting]["reason"]) == ("PENDING", "Resources")
        assert status["queue"]["running"] == 1 and status["queue"]["pending_reasons"] == {"Resources": 1}
        nodes = {node["name"]: node for node in status["nodes"]}
        assert "DRAIN" in nodes["c001"]["state"] and nodes["c001"]["reason"].startswith(DRAIN_REASON)
        assert (nodes["c000"]["gpus"], nodes["c000"]["gpus_allocated"]) == (1, 1)
        assert status["gpus"] == {"total": 2, "allocated": 1, "drained": 1}

        # The finished job's cost: elapsed x GPUs x price, exactly (physics has no other job).
        expected = job_cost(int(done["ElapsedRaw"]), 1, Decimal(PRICE))
        costs = {entry["account"]: entry for entry in status["cost"]["accounts"]}
        assert status["cost"]["accounting"] and status["cost"]["prices_per_gpu_hour"] == {"local": float(PRICE)}
        assert costs["physics"]["jobs"] == 1
        assert Decimal(str(costs["physics"]["usd"])) == round(expected, 6), (costs, done)
        assert costs["chem"]["usd"] > 0  # the running job so far
        report.append(f"physics: {done['ElapsedRaw']} s x 1 GPU x ${PRICE}/GPU-hour = ${expected}")

        text = run_status(env)
        report.append("$ ./status.sh e2e\n" + text.stdout)
        assert text.returncode == 0, text.stdout + text.stderr
        assert DRAIN_REASON in text.stdout and "1 pending (Resources: 1)" in text.stdout
        assert "GPUs: 1 of 2 allocated, 1 on drained nodes" in text.stdout
        CLIENT.run("scancel", running, waiting)
    finally:
        try:
            destroy_state(state)
        except CommandFailedError as error:
            print(f"destroy failed: {error}")
        teardown()
        remove_kept_accounting()

    with capsys.disabled():
        print("\n" + "\n".join(report))
    assert leftovers(CLUSTER) == []


def test_status_reaches_an_ssh_host_through_the_stacks_connection(tmp_path, monkeypatch):
    """The e2e stack with its one host over SSH (this machine through a test sshd), nothing
    built: the host answers with the pinned key and the stack's private key, its drift check
    runs there (everything MISSING), the cluster has no Slurm client there; with another host key
    pinned, the host is said not to answer and the rest is still shown."""
    require_host()
    assert not Path(f"/var/lib/gpucluster/{CLUSTER}").exists(), "an e2e cluster is up"
    outputs = tmp_path / "outputs.json"
    outputs.write_text("{}")
    monkeypatch.setenv("STATUS_OUTPUTS", str(outputs))
    try:
        server = ssh_hosts.start(SSH_HOST)
        monkeypatch.setenv(f"STATUS_SECRET_{SECRET}", server["client_key"])
        cluster = parse_stack_config(one_ssh_host_config(server["host_key"])).cluster
        report = status.gather(STACK, cluster)
        host = report["hosts"][0]
        assert (host["name"], host["connection"], host["reachable"]) == ("h1", "ssh root@127.0.0.1:2222", True)
        assert host["drift_checked"] and "MISSING  bridge e2ebr0" in host["drift"], host
        assert report["slurm"]["message"] == (
            f"no /var/lib/gpucluster/{CLUSTER}/bin/scontrol on root@127.0.0.1:2222: the cluster is not built there"
        )
        assert report["stack_message"] == "stack e2e is not up (it has no outputs): ./up.sh e2e brings it up"

        key = tmp_path / "another_host_key"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "", "-f", str(key)], check=True)
        wrong_key = " ".join(key.with_suffix(".pub").read_text().split()[:2])
        cluster = parse_stack_config(one_ssh_host_config(wrong_key)).cluster
        report = status.gather(STACK, cluster)
        host = report["hosts"][0]
        assert not host["reachable"] and host["message"] == (
            "root@127.0.0.1:2222 does not answer: Host key verification failed."
        ), host
        assert report["slurm"]["message"] == "Slurm not reached: its host h1 does not answer"
        assert "h1    ssh root@127.0.0.1:2222  root@127.0.0.1:2222 does not answer" in status.render(report)
    finally:
        ssh_hosts.remove(SSH_HOST)
    assert leftovers(CLUSTER) == []
