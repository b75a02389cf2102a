"""Slurm as an end-to-end test reads it: a cluster's commands (its host client's wrappers,
which run the node image's commands in a container of the cluster), by root or by one of the
cluster's people, and the waits on their answers."""

import os
import re
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path


def cluster_slurm(cluster_dir: str) -> dict[str, str]:
    """The environment whose `sinfo`, `srun`... are a cluster's on this host: its client's
    wrappers first on PATH (components/files/lib/slurm_client.sh)."""
    return {"PATH": f"{cluster_dir}/bin:{os.environ.get('PATH', '/usr/sbin:/usr/bin:/sbin:/bin')}"}


def client_container(env: dict[str, str]) -> str:
    """The container a cluster_slurm() environment's commands run in (named by its wrappers)."""
    wrapper = Path(env["PATH"].split(":", 1)[0], "sinfo").read_text()
    return re.search(r"lxc-attach (?:-P \S+ )?-n (\S+)", wrapper).group(1)


def client_lxc_path(env: dict[str, str]) -> list[str]:
    """`-P PATH` where the wrappers name a host's own LXC path, else nothing."""
    found = re.search(r"lxc-attach -P (\S+) ", Path(env["PATH"].split(":", 1)[0], "sinfo").read_text())
    return ["-P", found.group(1)] if found else []


def as_person(env: dict[str, str], uid: int, argv: list[str], workdir: str = "/tmp") -> list[str]:
    """`argv` run by one of the cluster's people (uid = gid) in WORKDIR, with the cluster's
    client: where the wrappers run it, in the cluster's container, as that person there."""
    return [
        "lxc-attach", *client_lxc_path(env), "-n", client_container(env), "--clear-env",
        "-v", "PATH=/usr/bin:/bin", "-v", "LC_ALL=C", "-v", "SLURM_CONF=/etc/gpucluster/slurm.conf", "--",
        "setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--",
        "sh", "-c", 'cd "$1" && shift && exec "$@"', "sh", workdir, *argv,
    ]  # fmt: skip


@dataclass(frozen=True)
class SlurmClient:
    env: dict[str, str]  # cluster_slurm(): whose cluster, through which host's client
    uids: dict[str, int] = field(default_factory=dict)  # the cluster's people, by name

    def run(self, *argv: str, check: bool = True, timeout: int = 120) -> str:
        """A Slurm command run by root; its output."""
        return subprocess.run(
            argv, capture_output=True, text=True, check=check, timeout=timeout, env={**os.environ, **self.env}
        ).stdout

    def as_user(self, user: str, *argv: str, check: bool = True, timeout: int = 180) -> subprocess.CompletedProcess:
        """A Slurm command run by one of the cluster's people, from this host."""
        return subprocess.run(
            as_person(self.env, self.uids[user], list(argv)),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=check,
        )

    def sacct_rows(self, start: str, fields: str) -> list[dict]:
        """Every job since `start` (allocations only), one dict of `fields` each; none while
        slurmdbd does not answer."""
        done = subprocess.run(
            ["sacct", "-a", "-X", "-nP", "-S", start, f"--format={fields}"],
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
            env={**os.environ, **self.env},
        )
        if done.returncode != 0:
            return []
        keys = fields.split(",")
        return [dict(zip(keys, line.split("|"), strict=True)) for line in done.stdout.splitlines() if line]

    def job_state(self, job: str) -> tuple[str, str]:
        """(state, reason) of a job squeue still shows; ("", "") once it is gone."""
        out = self.run("squeue", "-h", "-j", job, "-o", "%T|%r", check=False).strip()
        return tuple(out.split("|")) if out else ("", "")

    def node_state(self, node: str) -> tuple[str, str]:
        """(state, reason) of a node."""
        state, reason = self.run("sinfo", "-h", "-N", "-n", node, "-o", "%T|%E").strip().split("|", 1)
        return state, reason

    def drained_by_health_check(self, node: str) -> bool:
        """The node is drained with the GPU health program's reason."""
        state, reason = self.node_state(node)
        return state.startswith("drain") and reason.startswith("gpu-health:")

    def submit(self, user: str, *options: str) -> str:
        """sbatch by one of the cluster's people; the job's id."""
        return self.as_user(user, "sbatch", "--parsable", "--chdir=/tmp", *options).stdout.strip()


def wait_for(what: str, condition, seconds: float) -> float:
    """Poll `condition` until it is true; the seconds it took."""
    started = time.monotonic()
    while not condition():
        assert time.monotonic() - started < seconds, f"timed out after {seconds}s waiting for {what}"
        time.sleep(0.5)
    return time.monotonic() - started


def gpus_of(tres: str) -> int:
    """The GPUs in a TRES string (`gres/gpu=N`)."""
    found = re.search(r"gres/gpu=(\d+)", tres)
    return int(found.group(1)) if found else 0
