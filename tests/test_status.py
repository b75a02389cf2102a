"""`./status.sh` without a cluster: Slurm 22.05's outputs read from fixtures (what
`scontrol -o show node|job` and `sacct -a -X -nP` printed in tests/test_e2e_status.py; the
*_no_gpu_tres files are the same without gres/gpu in the TRES, as a cluster without
accounting prints them), the cost arithmetic, and the whole report with canned hosts."""

import copy
import json
import subprocess
from decimal import Decimal
from pathlib import Path

import pytest

from components.composition.stack_config import ConfigError, parse_stack_config
from components.slurm import slurm_text
from ops import cost, hosts, status
from ops.stack import StackNotUpError, stack_cluster, stack_outputs
from tests.harness.program_harness import stack_config

FIXTURES = Path(__file__).parent / "status_fixtures"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


# ---- parsing ----


def test_scontrol_records_keep_values_with_spaces():
    record = slurm_text.scontrol_records(fixture("scontrol_show_node.txt"))[1]
    assert record["OS"] == "Linux 6.18.44-fc-v509 #1 SMP PREEMPT_DYNAMIC @0"
    assert record["Reason"] == "status e2e check [root@2026-11-23T12:39:05]"
    assert record["CoresPerSocket"] == "1" and record["Partitions"] == "tutorial"  # two spaces follow them
    assert record["AllocTRES"] == "" and record["CfgTRES"] == "cpu=2,mem=1M,billing=2,gres/gpu=1"
    assert slurm_text.scontrol_records("No jobs in the system\n") == []


def test_nodes_state_gpus_and_drain_reason():
    nodes = slurm_text.nodes(fixture("scontrol_show_node.txt"))
    assert [(n.name, n.state, n.gpus, n.gpus_allocated, n.drained) for n in nodes] == [
        ("c000", "MIXED", 1, 1, False),
        ("c001", "IDLE+DRAIN", 1, 0, True),
    ]
    assert nodes[0].reason == "" and nodes[1].reason == "status e2e check [root@2026-11-23T12:39:05]"
    assert nodes[0].partitions == ["tutorial"]


def test_jobs_running_and_pending_with_reasons():
    jobs = slurm_text.jobs(fixture("scontrol_show_job.txt"))
    assert [(j.job_id, j.name, j.user, j.account, j.state, j.reason, j.nodes, j.gpus, j.run_seconds) for j in jobs] == [
        ("1", "hostname", "root", "root", "COMPLETED", "None", ["c000", "c001"], 0, 0),
        ("2", "printenv", "root", "root", "COMPLETED", "None", ["c000"], 1, 0),
        ("3", "status-done", "alice", "physics", "COMPLETED", "None", ["c001"], 1, 3),
        ("4", "status-runs", "bob", "chem", "RUNNING", "None", ["c000"], 1, 4),
        ("5", "status-waits", "bob", "chem", "PENDING", "Resources", [], 1, 0),
    ]


def test_sacct_records():
    records = slurm_text.sacct_records(fixture("sacct.txt"))
    assert [(r.job_id, r.account, r.state, r.elapsed_seconds, r.gpus, r.nodes) for r in records] == [
        ("1", "root", "COMPLETED", 0, 0, ["c000", "c001"]),
        ("2", "root", "COMPLETED", 0, 1, ["c000"]),
        ("3", "physics", "COMPLETED", 3, 1, ["c001"]),
        ("4", "chem", "RUNNING", 4, 1, ["c000"]),
        ("5", "chem", "PENDING", 0, 0, []),
    ]


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("00:00:07", 7), ("05:06", 306), ("1-02:03:04", 93784), ("10", 600), ("12-00:00:00", 1036800)],
)
def test_durations(text, seconds):
    assert slurm_text.duration_seconds(text) == seconds


@pytest.mark.parametrize(
    ("hostlist", "names"),
    [
        ("c[000-002,005],web", ["c000", "c001", "c002", "c005", "web"]),
        ("c000", ["c000"]),
        ("gpu[8-10]", ["gpu8", "gpu9", "gpu10"]),
        ("c1a,c2a", ["c1a", "c2a"]),
        ("(null)", []),
        ("None assigned", []),
        ("", []),
    ],
)
def test_hostlists(hostlist, names):
    assert slurm_text.expand_hostlist(hostlist) == names


@pytest.mark.parametrize(
    ("tres", "gpus"),
    [
        ("cpu=1,mem=0,node=1", 0),
        ("cpu=2,node=2,billing=2,gres/gpu=2", 2),
        ("billing=1,cpu=1,gres/gpu:a100=3,gres/gpu=3,mem=0", 3),
        ("gres/gpu=12", 12),
        ("", 0),
    ],
)
def test_gpus_of_tres(tres, gpus):
    assert slurm_text.tres_gpus(tres) == gpus


@pytest.mark.parametrize(
    ("gres", "gpus"),
    [
        ("gpu:1", 1),
        ("gpu:a100:2(S:0-1)", 2),
        ("gres:gpu:1", 1),
        ("gres/gpu:a100=3", 3),
        ("gpu", 1),
        ("gpu:1,mps:100", 1),
        ("(null)", 0),
        ("", 0),
    ],
)
def test_gpus_of_gres(gres, gpus):
    assert slurm_text.gres_gpus(gres) == gpus


def test_without_gpus_as_a_tres_the_gres_and_the_jobs_tell():
    """Without accounting slurm.conf has no AccountingStorageTRES=gres/gpu: no GPUs in TRES."""
    nodes = slurm_text.nodes(fixture("scontrol_show_node_no_gpu_tres.txt"))
    assert [(n.name, n.gpus, n.gpus_allocated) for n in nodes] == [("c000", 1, None), ("c001", 1, None)]
    jobs = slurm_text.jobs(fixture("scontrol_show_job_no_gpu_tres.txt"))
    assert [(j.job_id, j.gpus) for j in jobs] == [("1", 0), ("2", 1), ("3", 1), ("4", 1), ("5", 1)]
    running = [j for j in jobs if j.state == "RUNNING"]
    assert [slurm_text.allocated_from_jobs(n.name, running) for n in nodes] == [1, 0]


# ---- cost ----


def test_cost_is_elapsed_times_gpus_times_price_exactly():
    assert cost.job_cost(3, 1, Decimal("3.6")) == Decimal("0.003")
    assert cost.job_cost(7200, 4, Decimal("1.006")) == Decimal("8.048")
    assert cost.job_cost(1, 1, Decimal("1.006")) * 3600 == Decimal("1.006")
    assert cost.job_cost(3600, 0, Decimal("5")) == 0
    assert cost.gpu_hours(5400, 2) == Decimal("3")


def test_cost_per_account_from_sacct():
    prices = {"c000": Decimal("3.6"), "c001": Decimal("3.6")}
    records = slurm_text.sacct_records(fixture("sacct.txt"))
    records.append(slurm_text.Record("9", "alice", "chem", "COMPLETED", 2, 2, ["c000", "c001"]))
    accounts = cost.per_account(((r.account, r.elapsed_seconds, r.gpus, r.nodes) for r in records), prices)
    assert [(a.account, a.jobs, a.gpu_hours, a.usd) for a in accounts] == [
        # chem: 4 s x 1 GPU + 2 s x 2 GPUs (+ a pending job) = 8 GPU-seconds at $0.001
        ("chem", 3, Decimal(8) / 3600, Decimal("0.008")),
        ("physics", 1, Decimal(3) / 3600, Decimal("0.003")),
        ("root", 2, Decimal(0), Decimal(0)),
    ]


def test_a_job_across_hosts_of_different_prices_pays_their_mean():
    prices = {"a": Decimal("1"), "b": Decimal("3")}
    assert cost.job_price(["a", "b"], prices) == Decimal("2")
    assert cost.job_price([], prices) == 0


def cluster_of(stack: str, change=None):
    config = copy.deepcopy(stack_config(stack))
    if change:
        change(config["cluster"])
    return parse_stack_config(config).cluster


def test_prices_per_host_owned_configured_and_ec2_from_the_table():
    local = cluster_of("e2e")
    assert cost.host_gpu_hour_price(local, local.cluster_hosts[0]) == 0  # owned, no price: free
    priced = cluster_of("e2e", lambda c: c["host"].update(gpu_hour_price=2.5))
    assert cost.node_prices(priced) == {f"c00{i}": Decimal("2.5") for i in range(4)}
    ec2 = cluster_of("ec2")
    # g5.xlarge: $1.006 an hour (components/aws/prices.py) for its one A10G.
    assert [cost.host_gpu_hour_price(ec2, h) for h in ec2.cluster_hosts] == [Decimal("1.006")] * 2

    def four_gpus_and_a_price(cluster):
        cluster["hosts"][0]["gpu"]["devices"] = [f"/dev/nvidia{i}" for i in range(4)]
        cluster["hosts"][1]["gpu_hour_price"] = 0.75

    shared = cluster_of("ec2", four_gpus_and_a_price)
    assert [cost.host_gpu_hour_price(shared, h) for h in shared.cluster_hosts] == [Decimal("0.2515"), Decimal("0.75")]


def test_burst_nodes_are_priced_at_their_partition_s_dearest_type_per_gpu():
    """N6: a burst job is billed by the hour; it was counted at $0."""
    from tests.burst.stack import burst_stack

    burst = parse_stack_config(burst_stack()).cluster
    prices = cost.node_prices(burst)
    # g5.xlarge $1.006 and g4dn.xlarge $0.526 an hour, one GPU each: the dearest, per GPU.
    assert [prices[f"burst-{i}"] for i in range(1, 5)] == [Decimal("1.006")] * 4
    assert cost.burst_partition_prices(burst) == {"burst": Decimal("1.006")}
    row = slurm_text.Record("11", "alice", "chem", "COMPLETED", 3600, 1, ["burst-1"])
    (chem,) = cost.per_account([(row.account, row.elapsed_seconds, row.gpus, row.nodes)], prices)
    assert chem.usd == Decimal("1.006")
    config = burst_stack()
    config["cluster"]["burst"]["partitions"][0]["instance_types"] = [{"name": "g5.12xlarge", "gpus": 4, "price": 6.0}]
    assert cost.node_prices(parse_stack_config(config).cluster)["burst-1"] == Decimal("1.5")


def test_gpu_hour_price_field_is_checked():
    for bad, problem in ((-1, "greater than or equal to 0"), ("2", "valid number")):
        with pytest.raises(ConfigError, match=rf"cluster.host.gpu_hour_price: .*{problem}"):
            cluster_of("e2e", lambda c, bad=bad: c["host"].update(gpu_hour_price=bad))


def test_money_shown_in_cents_or_below_a_cent():
    assert cost.usd(Decimal("8.048")) == "$8.05"
    assert cost.usd(Decimal("0.003")) == "$0.003"
    assert cost.usd(Decimal(0)) == "$0.00"


# ---- the stack's outputs ----


def test_outputs_from_a_file(tmp_path, monkeypatch):
    given = tmp_path / "outputs.json"
    given.write_text(json.dumps({"web_url": "http://10.43.3.1:7000/"}))
    monkeypatch.setenv("STATUS_OUTPUTS", str(given))
    assert stack_outputs("e2e") == {"web_url": "http://10.43.3.1:7000/"}


def test_a_stack_without_outputs_is_not_up(tmp_path, monkeypatch):
    given = tmp_path / "outputs.json"
    given.write_text("{}")
    monkeypatch.setenv("STATUS_OUTPUTS", str(given))
    with pytest.raises(StackNotUpError, match=r"^stack e2e is not up \(it has no outputs\): ./up.sh e2e brings it up$"):
        stack_outputs("e2e")


@pytest.mark.parametrize(
    "error",
    [
        "error: no stack named 'gone' found",
        "error: unable to open bucket file:///x/.pulumi-state?no_tmp_dir=true: stat /x/.pulumi-state: "
        "no such file or directory",
    ],
)
def test_a_stack_the_cli_does_not_know(monkeypatch, error):
    monkeypatch.delenv("STATUS_OUTPUTS", raising=False)
    failed = subprocess.CompletedProcess([], 255, "", f"warning: A new version\n{error}\n")
    monkeypatch.setattr("ops.stack._pulumi", lambda stack, *argv: failed)
    with pytest.raises(StackNotUpError) as raised:
        stack_outputs("gone")
    assert str(raised.value) == (
        "stack gone is not up (the state in .pulumi-state/ has no such stack): ./up.sh gone brings it up"
    )


def test_the_cli_failing_otherwise_is_quoted(monkeypatch):
    monkeypatch.delenv("STATUS_OUTPUTS", raising=False)
    failed = subprocess.CompletedProcess([], 255, "", "error: passphrase must be set\n")
    monkeypatch.setattr("ops.stack._pulumi", lambda stack, *argv: failed)
    with pytest.raises(StackNotUpError, match=r"^stack x: ./pulumi.sh stack output failed: error: passphrase must be"):
        stack_outputs("x")


def test_a_stack_file_that_is_not_there(monkeypatch):
    monkeypatch.setenv("STATUS_STACK_FILE", "/nonexistent/Pulumi.x.yaml")
    with pytest.raises(ConfigError, match="no stack file for x"):
        stack_cluster("x")


# ---- the report, with canned hosts ----


class Answering(hosts.Shell):
    """A host whose Slurm prints the fixtures, with one drift line."""

    where = "canned host"

    def __init__(self, sacct_ok: bool = True, suffix: str = ""):
        self.calls, self.sacct_ok, self.suffix = [], sacct_ok, suffix

    def run(self, argv, stdin="", env=None, timeout=60):
        self.calls.append((argv, env))
        out, code = "", 0
        if argv[0].endswith("/scontrol") and argv[1:3] == ["-o", "show"]:
            out = fixture(f"scontrol_show_{argv[3]}{self.suffix}.txt")
        elif argv[0].endswith("/sacct"):
            out, code = (fixture("sacct.txt"), 0) if self.sacct_ok else ("", 1)
        elif argv[0] == "/bin/bash":
            out, code = "ok       bridge e2ebr0 up\nMISSING  container e2e-c003 running\n", 1
        err = "" if code == 0 else "sacct: error: Problem talking to the database: Connection refused"
        return subprocess.CompletedProcess(argv, code, out, err)


class InAnotherZone(Answering):
    """The controller's host, whose month has begun already (its zone is ahead of this one)."""

    def run(self, argv, stdin="", env=None, timeout=60):
        if argv == status.MONTH_START_ON_HOST:
            self.calls.append((argv, env))
            return subprocess.CompletedProcess(argv, 0, "2026-12-01T00:00:00\n", "")
        return super().run(argv, stdin, env, timeout)


def test_the_month_begins_in_the_time_zone_of_the_host_sacct_runs_on(outputs):
    """N14: sacct reads -S in its host's zone; the month's start is taken from that host."""
    shell = InAnotherZone()
    cluster = cluster_of("e2e", accounted)
    report = status.gather("e2e", cluster, now=0, open_shell=lambda host, secret, workdir: (shell, ""))
    assert report["cost"]["month_start"] == "2026-12-01T00:00:00"
    (sacct,) = [argv for argv, _ in shell.calls if argv[0].endswith("/sacct")]
    assert sacct[sacct.index("-S") + 1] == "2026-12-01T00:00:00"
    # A host that does not say: this machine's local month, as before.
    assert status.host_month_start(Dead()) is None


class Dead(hosts.Shell):
    where = "root@192.168.10.12:22"

    def run(self, argv, stdin="", env=None, timeout=60):
        return subprocess.CompletedProcess(
            argv, 255, "", "ssh: connect to host 192.168.10.12 port 22: Connection refused\n"
        )


@pytest.fixture
def outputs(tmp_path, monkeypatch):
    given = tmp_path / "outputs.json"
    given.write_text(json.dumps({"web_url": "http://10.43.3.1:7000/", "node_list": "c[000-003]"}))
    monkeypatch.setenv("STATUS_OUTPUTS", str(given))
    return given


def accounted(cluster):
    cluster["host"]["gpu_hour_price"] = 3.6
    cluster["users"] = [{"name": "alice", "uid": 2101, "gid": 2101}, {"name": "bob", "uid": 2102, "gid": 2102}]
    cluster["accounting"] = {
        "nat_address": "10.43.3.20",
        "accounts": [{"name": "physics", "users": ["alice"]}, {"name": "chem", "users": ["bob", "alice"]}],
    }


def test_report_of_a_cluster_with_accounting(outputs):
    shell = Answering()
    cluster = cluster_of("e2e", accounted)
    report = status.gather("e2e", cluster, now=0, open_shell=lambda host, secret, workdir: (shell, ""))
    assert report["stack_up"] and report["web_url"] == "http://10.43.3.1:7000/"
    assert report["hosts"] == [
        {
            "name": "local",
            "connection": "local",
            "reachable": True,
            "message": "1 drift line(s)",
            "drift_checked": True,
            "drift": ["MISSING  container e2e-c003 running"],
        }
    ]
    assert report["problems"] == ["host local: 1 drift line(s)"]
    # Slurm's commands are the host's client (the node image's, run in the cluster's container).
    assert report["slurm"] == {"via": "local", "client": "/var/lib/gpucluster/e2e/bin", "answered": True}
    slurm_calls = [argv[0] for argv, _ in shell.calls if argv[0].rsplit("/", 1)[-1] in ("scontrol", "sacct")]
    assert slurm_calls == [f"/var/lib/gpucluster/e2e/bin/{name}" for name in ["scontrol"] * 2 + ["sacct"]]
    assert report["gpus"] == {"total": 2, "allocated": 1, "drained": 1}
    assert report["queue"]["running"] == 1 and report["queue"]["pending"] == 1
    assert report["queue"]["pending_reasons"] == {"Resources": 1}
    money = report["cost"]
    assert money["accounting"] and money["message"] == "" and money["prices_per_gpu_hour"] == {"local": 3.6}
    assert money["accounts"] == [
        {"account": "chem", "jobs": 1, "gpu_hours": 0.001111, "usd": 0.004},  # the pending job not counted
        {"account": "physics", "jobs": 1, "gpu_hours": 0.000833, "usd": 0.003},
        {"account": "root", "jobs": 2, "gpu_hours": 0.0, "usd": 0.0},
    ]
    assert money["total_usd"] == 0.007
    sacct = next(argv for argv, _ in shell.calls if argv[0].endswith("/sacct"))
    assert sacct[1:5] == ["-a", "-X", "-nP", "-T"] and sacct[-1].endswith("ElapsedRaw,AllocTRES,NodeList")
    json.dumps(report)  # --json prints it as is

    text = status.render(report)
    assert "web app: http://10.43.3.1:7000/" in text
    assert "local: MISSING  container e2e-c003 running" in text
    assert "GPUs: 1 of 2 allocated, 1 on drained nodes" in text
    assert "c001  idle+drain  0/1   status e2e check [root@2026-11-23T12:39:05]" in text
    assert "queue: 1 running, 1 pending (Resources: 1)" in text
    assert "5      bob   chem     pending  1     0:00:00  Resources" in text
    assert "chem     1     0.0011     $0.004" in text
    assert "per GPU-hour: local $3.60" in text


def test_report_without_accounting_shows_the_running_jobs_cost(outputs):
    cluster = cluster_of("e2e", lambda c: c["host"].update(gpu_hour_price=3.6))
    shell = Answering(suffix="_no_gpu_tres")
    report = status.gather("e2e", cluster, now=0, open_shell=lambda host, secret, workdir: (shell, ""))
    assert report["gpus"] == {"total": 2, "allocated": 1, "drained": 1}
    money = report["cost"]
    assert not money["accounting"] and money["accounts"] == [] and money["total_usd"] is None
    assert money["message"].startswith("the cost of finished jobs needs accounting")
    assert money["running"] == [{"job_id": "4", "account": "chem", "gpus": 1, "seconds": 4, "usd": 0.004}]
    text = status.render(report)
    assert "the cost of finished jobs needs accounting" in text
    assert "4      chem     1     0:00:04  $0.004" in text


def test_sacct_without_slurmdbd_is_said(outputs):
    cluster = cluster_of("e2e", accounted)
    report = status.gather("e2e", cluster, now=0, open_shell=lambda h, s, w: (Answering(sacct_ok=False), ""))
    assert report["cost"]["message"] == (
        "sacct does not answer (slurmdbd down?): sacct: error: Problem talking to the database: Connection refused"
    )
    assert report["queue"]["running"] == 1  # the rest is still there


def test_a_host_that_does_not_answer_and_the_rest_still_shown(outputs):
    """Two hosts: gpu1 (this machine) answers, gpu2 (SSH) does not."""
    cluster = cluster_of("twohost")
    shells = {"gpu1": Answering(), "gpu2": Dead()}
    report = status.gather("twohost", cluster, now=0, open_shell=lambda host, s, w: (shells[host.name], ""))
    gpu2 = report["hosts"][1]
    assert (gpu2["name"], gpu2["connection"], gpu2["reachable"]) == ("gpu2", "ssh root@192.168.10.12:22", False)
    assert gpu2["message"] == (
        "root@192.168.10.12:22 does not answer: ssh: connect to host 192.168.10.12 port 22: Connection refused"
    )
    assert f"host gpu2: {gpu2['message']}" in report["problems"]
    assert report["slurm"]["answered"] and report["slurm"]["via"] == "gpu1"
    assert [n["name"] for n in report["nodes"]] == ["c000", "c001"]
    text = status.render(report)
    assert "gpu2  ssh root@192.168.10.12:22  root@192.168.10.12:22 does not answer: ssh: connect" in text
    assert "queue: 1 running" in text


def test_a_retired_host_is_not_dialled(outputs):
    cluster = cluster_of("twohost", lambda c: c["hosts"][1].update(retired=True))
    opened = []

    def open_shell(host, secret, workdir):
        opened.append(host.name)
        return Answering(), ""

    report = status.gather("twohost", cluster, now=0, open_shell=open_shell)
    assert opened == ["gpu1"] and report["hosts"][1]["message"] == "retired: not reached"
    assert not any("gpu2" in problem for problem in report["problems"])


def test_slurm_on_a_dead_controller_host(outputs):
    """No host of the stack is this machine and the controller's host does not answer."""

    def remote_only(cluster):
        cluster["hosts"][0]["connection"] = {**cluster["hosts"][1]["connection"], "address": "192.168.10.11"}

    cluster = cluster_of("twohost", remote_only)
    report = status.gather("twohost", cluster, now=0, open_shell=lambda host, s, w: (Dead(), ""))
    assert report["slurm"] == {
        "via": "gpu1",
        "client": "/var/lib/gpucluster/duo/bin",
        "answered": False,
        "message": "Slurm not reached: its host gpu1 does not answer",
    }
    assert report["nodes"] == [] and report["queue"]["jobs"] == []
    assert "Slurm not reached: its host gpu1 does not answer" in status.render(report)


def test_the_stack_not_up_is_said_and_the_hosts_still_checked(tmp_path, monkeypatch):
    given = tmp_path / "outputs.json"
    given.write_text("{}")
    monkeypatch.setenv("STATUS_OUTPUTS", str(given))
    report = status.gather("e2e", cluster_of("e2e"), now=0, open_shell=lambda h, s, w: (Answering(), ""))
    assert not report["stack_up"] and report["problems"][0] == report["stack_message"]
    assert report["hosts"][0]["reachable"]
    assert status.render(report).startswith(
        "stack e2e (cluster e2e)\n"
        "  stack e2e is not up (it has no outputs): ./up.sh e2e brings it up\n"
        "web app: (none)\n"
    )


def test_an_ec2_host_is_said_not_reached(tmp_path):
    ec2 = cluster_of("ec2")
    shell, why = hosts.open_shell(ec2.cluster_hosts[0], lambda name: "", tmp_path)
    assert shell is None and why.startswith("not reached: an EC2 host's SSH host key is generated in the stack's state")


def test_an_ssh_host_without_its_key_is_said_not_reached(tmp_path):
    host = cluster_of("twohost").cluster_hosts[1]

    def no_secret(name):
        raise LookupError(f"the stack secret {name} cannot be read (no passphrase)")

    assert hosts.open_shell(host, no_secret, tmp_path) == (
        None,
        "not reached: the stack secret gpu2SshKey cannot be read (no passphrase)",
    )


def test_ssh_uses_the_stacks_connection_and_a_dead_port_is_named(tmp_path):
    """The real OpenSSH client, the host key pinned, against a port where nothing listens."""

    host = cluster_of("twohost").cluster_hosts[1]
    # Nothing listens on port 1 of this machine (the config refuses this machine as an SSH host).
    host = host.model_copy(
        update={"connection": host.connection.model_copy(update={"address": "127.0.0.1", "port": 1})}
    )
    shell, why = hosts.open_shell(host, lambda name: "not a key", tmp_path)
    assert why == "" and isinstance(shell, hosts.SshShell)
    assert shell.argv[-1] == "127.0.0.1" and "StrictHostKeyChecking=yes" in shell.argv
    assert (tmp_path / "gpu2" / "known_hosts").read_text() == f"[127.0.0.1]:1 {host.connection.host_key}\n"
    assert (tmp_path / "gpu2" / "id").stat().st_mode & 0o777 == 0o600
    message = hosts.probe(shell)
    assert message.startswith("root@127.0.0.1:1 does not answer: ") and "Connection refused" in message


def test_help_describes_what_it_shows_and_succeeds():
    """Issue 35 item 3: `./status.sh --help` printed the usage and exited 2."""
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run(["./status.sh", "--help"], cwd=root, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: ./status.sh STACK [--json]")
    for shown in ("hosts", "nodes", "jobs", "cost", "--json", "Exit status"):
        assert shown in done.stdout
    assert status.main(["-h"]) == 0


def test_usage_and_a_bad_stack(capsys, monkeypatch):
    assert status.main([]) == 2
    assert "usage: ./status.sh STACK [--json]" in capsys.readouterr().err
    monkeypatch.setenv("STATUS_STACK_FILE", "/nonexistent/Pulumi.x.yaml")
    assert status.main(["x", "--json"]) == 2
    assert "no stack file for x" in capsys.readouterr().err
