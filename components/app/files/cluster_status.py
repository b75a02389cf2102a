"""The cluster snapshot behind the web app's panel, written on the controller side.

Runs on the host (where the cluster's Slurm client and munged are) as a small loop: every
INTERVAL seconds it asks `sinfo` and `squeue` (SLURM_CONF from the environment) and replaces
OUT_FILE atomically with JSON. The web app's container reads that file through a read-only
mount, so the container that faces the network needs neither a Slurm client nor the munge
key. Python standard library only.

Usage: cluster_status.py CLUSTER OUT_FILE INTERVAL_S [--once]
"""

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MAX_JOBS_LISTED = 50


def gres_count(gres: str) -> int:
    """GPUs in a GRES string: 'gpu:1', 'gpu:tesla:2(S:0)', 'gpu:0(IDX:N/A)', '(null)'."""
    total = 0
    for item in gres.split(","):
        if not item.startswith("gpu"):
            continue
        count = item.split("(")[0].rsplit(":", 1)[-1]
        total += int(count) if count.isdigit() else 0
    return total


def run(program: str, *args: str) -> str:
    """A Slurm command's output; SLURM_BIN names the cluster's client (its node image's, run in
    its container), never a Slurm the host may have of another version."""
    path = os.path.join(os.environ.get("SLURM_BIN", ""), program)
    return subprocess.run([path, *args], capture_output=True, text=True, check=True, timeout=20).stdout


def collect(cluster: str, interval: float) -> dict:
    snapshot = {"cluster": cluster, "interval_s": interval, "nodes": []}
    snapshot["jobs"] = {"running": 0, "pending": 0, "list": []}
    try:
        nodes = {}
        for line in run("sinfo", "-h", "-N", "-O", "NodeHost:|,StateLong:|,Gres:|,GresUsed:|").splitlines():
            name, state, gres, used = line.split("|")[:4]
            nodes[name] = {"name": name, "state": state, "gpus_total": gres_count(gres), "gpus_used": gres_count(used)}
        snapshot["nodes"] = [nodes[name] for name in sorted(nodes)]
        # A job name may hold '|' (it comes last) or a newline (its rest is a line of its own,
        # with fewer fields: skipped).
        lines = run("squeue", "-h", "-o", "%i|%T|%b|%j").splitlines()
        jobs = [job for job in (line.split("|", 3) for line in lines) if len(job) == 4]
        snapshot["jobs"] = {
            "running": sum(1 for job in jobs if job[1] == "RUNNING"),
            "pending": sum(1 for job in jobs if job[1] == "PENDING"),
            "list": [{"id": i, "state": s, "gres": g, "name": n} for i, s, g, n in jobs[:MAX_JOBS_LISTED]],
        }
    except (subprocess.SubprocessError, OSError, ValueError, IndexError) as error:
        detail = getattr(error, "stderr", None) or str(error)
        if isinstance(detail, bytes):
            detail = detail.decode(errors="replace")
        snapshot["error"] = detail.strip().splitlines()[-1] if detail.strip() else type(error).__name__
    snapshot["written_at"] = time.time()
    return snapshot


def write_atomically(path: Path, snapshot: dict) -> None:
    """Replace `path` whole. The writer is root: its temporary file is a fresh name made with
    O_EXCL (mkstemp), so a link planted in the directory is never followed."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as out:
            out.write(json.dumps(snapshot, indent=1) + "\n")
            os.fchmod(out.fileno(), 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def main() -> None:
    cluster, out, interval = sys.argv[1], Path(sys.argv[2]), float(sys.argv[3])
    while True:
        started = time.monotonic()
        try:
            write_atomically(out, collect(cluster, interval))
        except OSError as error:  # a full disk or a removed directory: say so, try again
            print(f"cluster_status: cannot write {out}: {error}", file=sys.stderr, flush=True)
        except Exception as error:  # noqa: BLE001 (output Slurm never gave before: say so, keep writing)
            print(f"cluster_status: {type(error).__name__}: {error}", file=sys.stderr, flush=True)
        if "--once" in sys.argv[4:]:
            return
        time.sleep(max(0.0, interval - (time.monotonic() - started)))


if __name__ == "__main__":
    main()
