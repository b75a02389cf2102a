"""The operator's view of a stack's cluster: `./status.sh STACK [--json]`.

Hosts (answering or not, drift against the config), nodes with their state, GPUs configured
and allocated and drain reasons, the queue (running, pending and why), the web app's URL, and
what the GPUs cost this month per account (sacct's GPU-hours times each host's price per
GPU-hour). Everything is read from the machine that runs `pulumi up`: the stack's config and
outputs, and each host through the stack's own connection. Whatever cannot be reached is said,
and the rest is still shown. Exit status 1 when something did not answer or drifted.
"""

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from decimal import Decimal
from pathlib import Path

from components.composition.config import ClusterConfig
from components.composition.stack_config import ConfigError
from components.slurm import slurm_text
from ops import cost, hosts
from ops.stack import StackNotUpError, stack_cluster, stack_outputs, stack_secret

SACCT_TIMEOUT_S = 60


def _last_line(done: subprocess.CompletedProcess) -> str:
    return (done.stderr.strip().splitlines() or done.stdout.strip().splitlines() or [f"exit {done.returncode}"])[-1]


def slurm_report(shell: hosts.Shell, client: str) -> dict:
    """Nodes and the queue, from `scontrol -o show node|job` by the host's Slurm client (`client`:
    its directory of wrappers running the node image's commands in a container of the cluster)."""
    scontrol = f"{client}/scontrol"
    if shell.run(["test", "-x", scontrol]).returncode != 0:
        return {"answered": False, "message": f"no {scontrol} on {shell.where}: the cluster is not built there"}
    node_out = shell.run([scontrol, "-o", "show", "node"])
    if node_out.returncode != 0:
        return {"answered": False, "message": f"slurmctld does not answer: {_last_line(node_out)}"}
    job_out = shell.run([scontrol, "-o", "show", "job"])
    nodes = slurm_text.nodes(node_out.stdout)
    jobs = slurm_text.jobs(job_out.stdout) if job_out.returncode == 0 else []
    return {"answered": True, "message": "", "nodes": nodes, "jobs": jobs}


def queue_summary(jobs: list[slurm_text.Job]) -> dict:
    running = [job for job in jobs if job.state == "RUNNING"]
    pending = [job for job in jobs if job.state == "PENDING"]
    reasons = Counter(job.reason for job in pending)
    return {
        "running": len(running),
        "pending": len(pending),
        "pending_reasons": dict(reasons.most_common()),
        "jobs": [
            {
                "job_id": job.job_id,
                "name": job.name,
                "user": job.user,
                "account": job.account,
                "state": job.state,
                "reason": job.reason,
                "partition": job.partition,
                "gpus": job.gpus,
                "run_seconds": job.run_seconds,
                "nodes": job.nodes,
            }
            for job in running + pending
        ],
    }


def _money(amount: Decimal) -> float:
    return float(round(amount, 6))


MONTH_START_ON_HOST = ["date", "+%Y-%m-01T00:00:00"]


def host_month_start(shell: hosts.Shell) -> str | None:
    """This month's first second where sacct runs, in that host's time zone (sacct reads -S in
    it); None when the host does not say (then this machine's local time is used)."""
    try:
        done = shell.run(MONTH_START_ON_HOST, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    answer = done.stdout.strip() if done.returncode == 0 else ""
    return answer if re.fullmatch(r"[0-9]{4}-[0-9]{2}-01T00:00:00", answer) else None


def cost_report(
    cluster: ClusterConfig, shell: hosts.Shell | None, client: str, jobs: list[slurm_text.Job], now: float
) -> dict:
    """This month's cost per account from sacct (with accounting); without it, the running jobs' cost."""
    prices = cost.node_prices(cluster)
    report = {
        "accounting": cluster.accounting is not None,
        "prices_per_gpu_hour": {
            **{host.name: _money(cost.host_gpu_hour_price(cluster, host)) for host in cluster.cluster_hosts},
            # Burst nodes: their partition's dearest type (the type a job got is not recorded).
            **{f"burst {name} (dearest type)": _money(p) for name, p in cost.burst_partition_prices(cluster).items()},
        },
        "month_start": slurm_text.month_start(now),
        "message": "",
        "accounts": [],
        "total_usd": None,
        "running": [],
    }
    running = [job for job in jobs if job.state == "RUNNING"]
    for job in running:
        usd = cost.job_cost(job.run_seconds, job.gpus, cost.job_price(job.nodes, prices))
        report["running"].append(
            {
                "job_id": job.job_id,
                "account": job.account,
                "gpus": job.gpus,
                "seconds": job.run_seconds,
                "usd": _money(usd),
            }
        )
    if cluster.accounting is None:
        report["message"] = (
            "the cost of finished jobs needs accounting (the stack's `accounting` section: slurmdbd); "
            "shown: the running jobs' cost so far"
        )
        return report
    if shell is None:
        report["message"] = "Slurm cannot be reached: no cost"
        return report
    report["month_start"] = host_month_start(shell) or report["month_start"]
    program, *args = slurm_text.sacct_since(report["month_start"])
    done = shell.run([f"{client}/{program}", *args], timeout=SACCT_TIMEOUT_S)
    if done.returncode != 0:
        report["message"] = f"sacct does not answer (slurmdbd down?): {_last_line(done)}"
        return report
    records = [r for r in slurm_text.sacct_records(done.stdout) if r.state != "PENDING"]  # not started
    accounts = cost.per_account(((r.account, r.elapsed_seconds, r.gpus, r.nodes) for r in records), prices)
    report["accounts"] = [
        {"account": a.account, "jobs": a.jobs, "gpu_hours": _money(a.gpu_hours), "usd": _money(a.usd)} for a in accounts
    ]
    report["total_usd"] = _money(sum((a.usd for a in accounts), Decimal(0)))
    return report


def gather(stack: str, cluster: ClusterConfig, now: float | None = None, open_shell=hosts.open_shell) -> dict:
    """Everything `status` shows, as data (the --json document). `open_shell(host, secret, workdir)`:
    how a host is reached (tests give canned shells)."""
    now = time.time() if now is None else now
    report: dict = {"stack": stack, "cluster": cluster.name, "problems": []}
    try:
        outputs = stack_outputs(stack)
        report["stack_up"], report["stack_message"] = True, ""
    except StackNotUpError as error:
        outputs = {}
        report["stack_up"], report["stack_message"] = False, str(error)
        report["problems"].append(str(error))
    report["web_url"] = outputs.get("web_url") or ""

    with tempfile.TemporaryDirectory(prefix="gpucluster-status-") as workdir:
        shells: dict[str, hosts.Shell] = {}
        host_reports = []
        for host in cluster.cluster_hosts:
            entry = hosts.HostReport(host.name, hosts.describe(host), reachable=False)
            if host.retired:  # gone for good: never dialled
                entry.message = "retired: not reached"
                host_reports.append(entry.as_dict())
                continue
            shell, why = open_shell(host, lambda name: stack_secret(stack, name), Path(workdir))
            if shell is not None:
                why = hosts.probe(shell)
            if why:
                entry.message = why
                report["problems"].append(f"host {host.name}: {why}")
            else:
                entry.reachable = True
                shells[host.name] = shell
                lines, why = hosts.drift(shell, cluster, host)
                entry.drift_checked, entry.drift = lines is not None, lines
                entry.message = why or (f"{len(lines)} drift line(s)" if lines else "no drift")
                if why or lines:
                    report["problems"].append(f"host {host.name}: {entry.message}")
            host_reports.append(entry.as_dict())
        report["hosts"] = host_reports

        # The cluster's Slurm client (the node image's, run in its container) on this machine
        # when it is a host, else on the controller's host.
        local = [h for h in cluster.cluster_hosts if h.connection.kind == "local" and h.name in shells]
        chosen = local[0] if local else cluster.controller_host
        shell = shells.get(chosen.name)
        client = f"{cluster.host_cluster_dir(chosen)}/bin"
        if shell is None:
            slurm = {"answered": False, "message": f"Slurm not reached: its host {chosen.name} does not answer"}
        else:
            slurm = slurm_report(shell, client)
        report["slurm"] = {"via": chosen.name, "client": client, "answered": slurm["answered"]}
        if not slurm["answered"]:
            report["slurm"]["message"] = slurm["message"]
            report["problems"].append(slurm["message"])
        nodes = slurm.get("nodes", [])
        jobs = slurm.get("jobs", [])
        running = [job for job in jobs if job.state == "RUNNING"]
        for node in nodes:
            if node.gpus_allocated is None:
                node.gpus_allocated = slurm_text.allocated_from_jobs(node.name, running)
        host_of = {node.name: cluster.node_host(node).name for node in cluster.nodes}
        report["nodes"] = [
            {
                "name": node.name,
                "host": host_of.get(node.name, ""),
                "state": node.state,
                "gpus": node.gpus,
                "gpus_allocated": node.gpus_allocated,
                "reason": node.reason,
            }
            for node in nodes
        ]
        report["gpus"] = {
            "total": sum(node.gpus for node in nodes),
            "allocated": sum(node.gpus_allocated for node in nodes),
            "drained": sum(node.gpus for node in nodes if node.drained),
        }
        report["queue"] = queue_summary(jobs)
        report["cost"] = cost_report(cluster, shell if slurm["answered"] else None, client, jobs, now)
    return report


def _duration(seconds: int) -> str:
    days, rest = divmod(seconds, 86400)
    text = f"{rest // 3600}:{rest % 3600 // 60:02d}:{rest % 60:02d}"
    return f"{days}-{text}" if days else text


def _table(rows: list[list[str]], indent: str = "  ") -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        indent + "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows
    ]


def render(report: dict) -> str:
    """The report as an operator reads it."""
    lines = [f"stack {report['stack']} (cluster {report['cluster']})"]
    if not report["stack_up"]:
        lines.append(f"  {report['stack_message']}")
    lines.append(f"web app: {report['web_url'] or '(none)'}")

    lines += ["", "hosts"]
    rows = [["HOST", "CONNECTION", "STATE"]]
    for host in report["hosts"]:
        rows.append([host["name"], host["connection"], ("answers; " if host["reachable"] else "") + host["message"]])
    lines += _table(rows)
    for host in report["hosts"]:
        lines += [f"    {host['name']}: {line}" for line in host["drift"][:10]]
        if len(host["drift"]) > 10:
            lines.append(f"    {host['name']}: ... {len(host['drift']) - 10} more (./verify.sh {report['stack']})")

    slurm, gpus = report["slurm"], report["gpus"]
    lines += ["", f"nodes (Slurm on {slurm['via']})"]
    if not slurm["answered"]:
        lines.append(f"  {slurm['message']}")
    else:
        lines.append(f"  GPUs: {gpus['allocated']} of {gpus['total']} allocated, {gpus['drained']} on drained nodes")
        rows = [["NODE", "STATE", "GPUS", "REASON"]]
        for node in report["nodes"]:
            rows.append(
                [node["name"], node["state"].lower(), f"{node['gpus_allocated']}/{node['gpus']}", node["reason"]]
            )
        lines += _table(rows)

        queue = report["queue"]
        reasons = ", ".join(f"{reason}: {count}" for reason, count in queue["pending_reasons"].items())
        lines += [
            "",
            f"queue: {queue['running']} running, {queue['pending']} pending" + (f" ({reasons})" if reasons else ""),
        ]
        if queue["jobs"]:
            rows = [["JOBID", "USER", "ACCOUNT", "STATE", "GPUS", "TIME", "NODES / REASON"]]
            for job in queue["jobs"]:
                where = ",".join(job["nodes"]) if job["state"] == "RUNNING" else job["reason"]
                rows.append(
                    [
                        job["job_id"],
                        job["user"],
                        job["account"],
                        job["state"].lower(),
                        str(job["gpus"]),
                        _duration(job["run_seconds"]),
                        where,
                    ]
                )
            lines += _table(rows)

    money = report["cost"]
    prices = ", ".join(f"{name} {cost.usd(Decimal(str(p)))}" for name, p in money["prices_per_gpu_hour"].items())
    lines += ["", f"cost this month (since {money['month_start']}; per GPU-hour: {prices})"]
    if money["message"]:
        lines.append(f"  {money['message']}")
    if money["accounts"]:
        rows = [["ACCOUNT", "JOBS", "GPU-HOURS", "USD"]]
        for entry in money["accounts"]:
            rows.append(
                [
                    entry["account"],
                    str(entry["jobs"]),
                    f"{entry['gpu_hours']:.4f}",
                    cost.usd(Decimal(str(entry["usd"]))),
                ]
            )
        rows.append(["total", "", "", cost.usd(Decimal(str(money["total_usd"])))])
        lines += _table(rows)
    elif money["total_usd"] is not None:
        lines.append("  no jobs this month")
    if money["running"] and not money["accounting"]:
        rows = [["JOBID", "ACCOUNT", "GPUS", "TIME", "USD SO FAR"]]
        for job in money["running"]:
            rows.append(
                [
                    job["job_id"],
                    job["account"],
                    str(job["gpus"]),
                    _duration(job["seconds"]),
                    cost.usd(Decimal(str(job["usd"]))),
                ]
            )
        lines += _table(rows)
    return "\n".join(lines) + "\n"


USAGE = "usage: ./status.sh STACK [--json]"
HELP = f"""{USAGE}

The operator's view of the stack STACK's cluster (stacks/Pulumi.STACK.yaml and its state):
  hosts      each host answering, and drift from what the program made (./verify.sh)
  nodes      every node's Slurm state, its GPUs, and why it is drained
  jobs       the queue: running and pending jobs, their user, account, GPUs and time
  web app    its URL, where the stack has one
  cost       this month's GPU-hours and USD per account (sacct, with accounting; without
             it, the running jobs' cost so far), priced per GPU-hour of each host
             (docs/status.md)

  --json     the same report as JSON
  --help     this text

Exit status: 0 when everything answered and nothing drifted, 1 otherwise, 2 for a usage
or config error."""


def main(argv: list[str]) -> int:
    if "--help" in argv or "-h" in argv:
        print(HELP)
        return 0
    args = [a for a in argv if a != "--json"]
    if len(args) != 1 or args[0].startswith("-"):
        print(f"{USAGE}   (./status.sh --help: what it shows)", file=sys.stderr)
        return 2
    stack = args[0]
    try:
        cluster = stack_cluster(stack)
    except ConfigError as error:
        print(error, file=sys.stderr)
        return 2
    if os.geteuid() != 0:
        print("note: the drift check reads iptables and LXC state: run as root for it", file=sys.stderr)
    report = gather(stack, cluster)
    if "--json" in argv:
        print(json.dumps(report, indent=2))
    else:
        sys.stdout.write(render(report))
    return 1 if report["problems"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
