"""What the burst programs share: their config, the EC2 client, Slurm's scontrol, the log,
and the state kept between runs. They run on the controller as SlurmUser, started by
slurmctld (resume, suspend, resume_fail) or by a timer (reconcile), with boto3 from their own
venv. Every step goes to the log file: Slurm discards their output."""

import contextlib
import fcntl
import json
import logging
import os
import subprocess
import tempfile
import time
from pathlib import Path

CONFIG_ENV = "GPUCLUSTER_BURST_CONFIG"
# Error codes that say "no capacity for this type here now": the type is skipped for a while.
CAPACITY_ERRORS = frozenset(
    {
        "InsufficientInstanceCapacity",
        "InsufficientCapacity",
        "InsufficientHostCapacity",
        "InsufficientReservedInstanceCapacity",
        "MaxSpotInstanceCountExceeded",
        "SpotMaxPriceTooLow",
        "Unsupported",
        "InstanceLimitExceeded",
        "VcpuLimitExceeded",
    }
)
LIVE_STATES = ["pending", "running", "stopping", "stopped"]
# The tag only burst instances carry (the partition's name): the cluster's own EC2 hosts carry
# gpucluster:cluster too, and must never be taken for burst nodes (orphans) and terminated.
BURST_TAG = "gpucluster:burst"


def load_config(path: str | None = None) -> dict:
    return json.loads(Path(path or os.environ[CONFIG_ENV]).read_text())


def logger(config: dict, program: str) -> logging.Logger:
    log = logging.getLogger(f"gpucluster-burst-{program}:{config['log_file']}")
    if not log.handlers:
        handler = logging.FileHandler(config["log_file"])
        handler.setFormatter(logging.Formatter(f"%(asctime)s {program}[%(process)d] %(levelname)s %(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
    return log


def ec2_client(config: dict):
    """EC2 with the controller's own key (its file, never the environment slurmctld passes)."""
    import boto3

    credentials = json.loads(Path(config["credentials_file"]).read_text())
    session = boto3.session.Session(
        aws_access_key_id=credentials["aws_access_key_id"],
        aws_secret_access_key=credentials["aws_secret_access_key"],
        region_name=config["region"],
    )
    return session.client("ec2", endpoint_url=config.get("endpoint_url") or None)


class Slurm:
    """scontrol, as slurmctld's programs use it."""

    def __init__(self, config: dict):
        self.scontrol = config.get("scontrol") or "scontrol"
        self.env = {**os.environ, **({"SLURM_CONF": config["slurm_conf"]} if config.get("slurm_conf") else {})}

    def _run(self, *args: str) -> str:
        return subprocess.run([self.scontrol, *args], capture_output=True, text=True, check=True, env=self.env).stdout

    def hostnames(self, hostlist: str) -> list[str]:
        return self._run("show", "hostnames", hostlist).split()

    def update(self, nodes: list[str], **settings: str) -> None:
        pairs = [f"{key}={value}" for key, value in settings.items()]
        self._run("update", f"nodename={','.join(nodes)}", *pairs)

    def nodes(self) -> dict[str, dict[str, str]]:
        """Every node: its fields (NodeName, State, Reason...) from `scontrol show node -o`."""
        found = {}
        for line in self._run("show", "node", "--oneliner").splitlines():
            fields = _fields(line)
            if "NodeName" in fields:
                found[fields["NodeName"]] = fields
        return found


def _fields(line: str) -> dict[str, str]:
    """`Key=value Key=value ...`; Reason's value runs to the next ` Key=` (it may hold spaces)."""
    fields, key = {}, None
    for word in line.split(" "):
        name, sep, value = word.partition("=")
        if sep and name and name[0].isupper() and name.isalnum():
            key = name
            fields[key] = value
        elif key:
            fields[key] += " " + word
    return fields


def state_flags(node: dict[str, str]) -> set[str]:
    return set(node.get("State", "").split("+"))


class StateFile:
    """A small JSON document in the programs' state directory, written atomically."""

    def __init__(self, config: dict, name: str):
        self.path = Path(config["state_dir"]) / name

    def read(self) -> dict:
        try:
            return json.loads(self.path.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return {}

    def write(self, data: dict) -> None:
        # A temporary file of this write's own: the resume program's threads write at once.
        fd, temporary = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".tmp", dir=self.path.parent)
        try:
            with os.fdopen(fd, "w") as out:
                os.fchmod(out.fileno(), 0o644)
                out.write(json.dumps(data, sort_keys=True))
            os.replace(temporary, self.path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary)
            raise

    @contextlib.contextmanager
    def locked(self):
        """The document for a read-modify-write that no other program interleaves with (an
        exclusive flock on `<name>.lock`): yields the data; written back when the block ends."""
        with open(self.path.with_suffix(".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                data = self.read()
                yield data
                self.write(data)
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)


def skipped_types(config: dict, now: float | None = None) -> dict[str, float]:
    """Types skipped after a capacity error, with the time the skip ends (still ahead)."""
    now = time.time() if now is None else now
    return {name: until for name, until in StateFile(config, "skipped.json").read().items() if until > now}


def skip_types(config: dict, names: list[str], now: float | None = None) -> float:
    """Skip these types until capacity_skip_s from now; under the state's lock, as the resume
    program's threads report capacity errors at nearly the same time."""
    now = time.time() if now is None else now
    until = now + config["capacity_skip_s"]
    with StateFile(config, "skipped.json").locked() as skipped:
        for name in [name for name, end in skipped.items() if end <= now]:
            del skipped[name]  # a skip that is over
        skipped.update(dict.fromkeys(names, until))
    return until


def instances_of(ec2, config: dict, nodes: list[str] | None = None, states=None) -> list[dict]:
    """The cluster's burst instances (of `nodes` only, if given) in `states`: tagged with the
    cluster and with BURST_TAG, so the cluster's own EC2 hosts are never among them."""
    filters = [
        {"Name": "tag:gpucluster:cluster", "Values": [config["cluster"]]},
        {"Name": "tag-key", "Values": [BURST_TAG]},
        {"Name": "instance-state-name", "Values": states or LIVE_STATES},
    ]
    if nodes is not None:
        filters.append({"Name": "tag:gpucluster:node", "Values": nodes})
    found = []
    for page in ec2.get_paginator("describe_instances").paginate(Filters=filters):
        for reservation in page["Reservations"]:
            found.extend(reservation["Instances"])
    return found


def tag(instance: dict, key: str) -> str | None:
    return next((t["Value"] for t in instance.get("Tags", []) if t["Key"] == key), None)
