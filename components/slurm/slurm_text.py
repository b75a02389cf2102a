"""What Slurm 22.05's commands print, read into plain data: `scontrol -o show node|job` (one
record per line, KEY=VALUE words), `sacct -nP` (fields separated by |), time and TRES strings,
and hostlists (c[000-003])."""

import re
import time
from dataclasses import dataclass, field

# A word starting a new KEY=VALUE pair: scontrol's keys hold letters, digits and : / _ (e.g.
# AllocNode:Sid, CPUs/Task); a value may hold spaces (Reason=, OS=), never a space-led KEY=.
_KEY = re.compile(r"(?:^| )([A-Za-z][A-Za-z0-9_:/]*)=")


def scontrol_records(text: str) -> list[dict[str, str]]:
    """Each line of `scontrol -o show node|job` as {KEY: VALUE}; no record for "No jobs in the system"."""
    records = []
    for line in text.splitlines():
        keys = list(_KEY.finditer(line.strip()))
        if not keys:
            continue
        line = line.strip()
        record = {}
        for here, after in zip(keys, [*keys[1:], None], strict=True):
            record[here.group(1)] = line[here.end() : after.start() if after else len(line)].strip()
        records.append(record)
    return records


def tres_gpus(tres: str) -> int:
    """GPUs in a TRES string (cpu=2,mem=1M,node=1,billing=2,gres/gpu=1); typed GPUs
    (gres/gpu:a100=1) are counted in the untyped entry too, so only that one is read."""
    found = re.search(r"(?:^|,)gres/gpu=(\d+)(?:,|$)", tres or "")
    return int(found.group(1)) if found else 0


def gres_gpus(gres: str) -> int:
    """GPUs in a GRES string, what a node has (Gres=gpu:2, gpu:a100:2(S:0-1)) or a job asks
    for (TresPerNode=gres:gpu:1, gres/gpu:a100=2): the sum of its GPU entries."""
    total = 0
    for entry in (gres or "").split(","):
        entry = re.sub(r"\(.*\)$", "", entry.strip()).removeprefix("gres:").removeprefix("gres/")
        if entry == "gpu":
            total += 1
        elif entry.startswith(("gpu:", "gpu=")):
            count = re.split(r"[:=]", entry)[-1]
            total += int(count) if count.isdigit() else 1
    return total


def duration_seconds(text: str) -> int:
    """Seconds of a Slurm duration: [D-]HH:MM:SS, MM:SS, or a plain number of minutes."""
    text = text.strip()
    days = 0
    if "-" in text:
        day, text = text.split("-", 1)
        days = int(day)
    parts = [int(p) for p in text.split(":")]
    if len(parts) == 1:
        return days * 86400 + parts[0] * 60
    while len(parts) < 3:
        parts.insert(0, 0)
    hours, minutes, seconds = parts
    return ((days * 24 + hours) * 60 + minutes) * 60 + seconds


def expand_hostlist(hostlist: str) -> list[str]:
    """c[000-002,005],web -> c000 c001 c002 c005 web (Slurm brackets only a trailing number)."""
    names = []
    for part in re.findall(r"[^,\[]+(?:\[[^\]]*\])?", hostlist or ""):
        found = re.fullmatch(r"(.*)\[([^\]]*)\]", part)
        if not found:
            names.append(part)
            continue
        prefix, ranges = found.groups()
        for item in ranges.split(","):
            low, _, high = item.partition("-")
            for number in range(int(low), int(high or low) + 1):
                names.append(f"{prefix}{number:0{len(low)}d}")
    return [name for name in names if name and name not in ("(null)", "None assigned")]


@dataclass
class Node:
    name: str
    state: str
    gpus: int
    gpus_allocated: int | None
    """None where GPUs are no TRES (no accounting): the running jobs tell (allocated_from_jobs)."""
    reason: str = ""
    partitions: list[str] = field(default_factory=list)

    @property
    def drained(self) -> bool:
        return "DRAIN" in self.state.upper()


def nodes(scontrol_show_node: str) -> list[Node]:
    """`scontrol -o show node`: state (IDLE+DRAIN...), GPUs configured (Gres=) and allocated
    (AllocTRES, where slurm.conf counts gres/gpu as a TRES: AccountingStorageTRES), reason."""
    found = []
    for record in scontrol_records(scontrol_show_node):
        if "NodeName" not in record:
            continue
        reason = record.get("Reason", "")
        found.append(
            Node(
                name=record["NodeName"],
                state=record.get("State", "UNKNOWN"),
                gpus=gres_gpus(record.get("Gres", "")),
                gpus_allocated=tres_gpus(record.get("AllocTRES", ""))
                if "gres/gpu" in record.get("CfgTRES", "")
                else None,
                reason="" if reason in ("(null)", "none") else reason,
                partitions=[p for p in record.get("Partitions", "").split(",") if p],
            )
        )
    return found


@dataclass
class Job:
    job_id: str
    name: str
    user: str
    account: str
    state: str
    reason: str
    partition: str
    nodes: list[str]
    gpus: int
    run_seconds: int


def job_gpus(record: dict[str, str]) -> int:
    """A job's GPUs: its TRES where GPUs are a TRES (allocated once it runs), else what it asks
    for (TresPerNode x nodes, or TresPerJob)."""
    tres = record.get("TRES", "")
    if "gres/gpu" in tres:
        return tres_gpus(tres)
    per_node = gres_gpus(record.get("TresPerNode", ""))
    if per_node:
        return per_node * int(record.get("NumNodes", "1").split("-")[0])
    return gres_gpus(record.get("TresPerJob", ""))


def allocated_from_jobs(node: str, running: list["Job"]) -> int:
    """GPUs the running jobs hold on a node (their GPUs spread evenly over their nodes)."""
    return sum(job.gpus // len(job.nodes) for job in running if node in job.nodes)


def jobs(scontrol_show_job: str) -> list[Job]:
    """`scontrol -o show job`: the queue with users, accounts, reasons, and each job's GPUs
    (TRES: allocated for a running job, asked for by a pending one) and run time so far."""
    found = []
    for record in scontrol_records(scontrol_show_job):
        if "JobId" not in record:
            continue
        found.append(
            Job(
                job_id=record["JobId"],
                name=record.get("JobName", ""),
                user=record.get("UserId", "").split("(")[0],
                account=record.get("Account", ""),
                state=record.get("JobState", ""),
                reason=record.get("Reason", "None"),
                partition=record.get("Partition", ""),
                nodes=expand_hostlist(record.get("NodeList", "")),
                gpus=job_gpus(record),
                run_seconds=duration_seconds(record.get("RunTime", "0")),
            )
        )
    return found


# What `status` asks sacct for, in this order (sacct -nP --format=...).
SACCT_FIELDS = ("JobID", "User", "Account", "State", "ElapsedRaw", "AllocTRES", "NodeList")


def month_start(now: float) -> str:
    """The first second of this month, in local time, as sacct takes it."""
    return time.strftime("%Y-%m-01T00:00:00", time.localtime(now))


def sacct_since(start: str) -> list[str]:
    """sacct of every user's jobs (one line each, no steps) from `start` until now, truncated
    to that window (-T), with the fields sacct_records reads."""
    return ["sacct", "-a", "-X", "-nP", "-T", "-S", start, "-E", "now", f"--format={','.join(SACCT_FIELDS)}"]


@dataclass
class Record:
    job_id: str
    user: str
    account: str
    state: str
    elapsed_seconds: int
    gpus: int
    nodes: list[str]


def sacct_records(text: str) -> list[Record]:
    """`sacct -a -X -nP --format=<SACCT_FIELDS>`: one record per job allocation."""
    found = []
    for line in text.splitlines():
        if not line.strip():
            continue
        values = dict(zip(SACCT_FIELDS, line.split("|"), strict=True))
        found.append(
            Record(
                job_id=values["JobID"],
                user=values["User"],
                account=values["Account"],
                state=values["State"],
                elapsed_seconds=int(values["ElapsedRaw"] or 0),
                gpus=tres_gpus(values["AllocTRES"]),
                nodes=expand_hostlist(values["NodeList"]),
            )
        )
    return found
