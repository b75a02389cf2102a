"""End-to-end job containment, run by tests/test_e2e.py on its grown cluster: the node c004
has two stand-in GPUs (nvidia5, nvidia6), each split into two Slurm shards, and two CPUs.

What a job is given is what it gets, inside its node (Slurm's cgroup plugins, cgroup.conf):
- GPUs: two `--gres=gpu:1` jobs at once each open their own GPU (ENXIO: allowed, no driver
  behind the stand-in) and get EPERM on the other; a job without `--gres` gets EPERM on both;
  two shard jobs and a whole-GPU neighbour share out the GPUs the same way;
- cores: a one-CPU job's Cpus_allowed_list is one CPU, a two-CPU job's both;
- memory: a job past its `--mem` ends OUT_OF_MEMORY, and a job beside it completes;
- processes: a job's double-forked sleeper is gone once the job ends.
"""

import json
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

NODE = "c004"
# In a job: what it was told, which GPUs it may open, the CPUs it may run on.
PROBE = r"""
import errno, json, os, sys, time
started = time.time()
opened = {}
for path in sys.argv[1:]:
    try:
        os.close(os.open(path, os.O_RDWR))
        opened[path] = "ok"
    except OSError as error:
        opened[path] = errno.errorcode[error.errno]
cpus = next(l.split(":", 1)[1].strip() for l in open("/proc/self/status") if l.startswith("Cpus_allowed_list"))
time.sleep(3)  # long enough for the jobs started beside it to overlap
print(json.dumps({"visible": os.environ.get("CUDA_VISIBLE_DEVICES"), "opened": opened, "cpus": cpus,
                  "started": started, "ended": time.time()}))
"""


def _srun(env: dict, *args: str, timeout: int = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["srun", "-w", NODE, "-n1", "--mem=64", "--chdir=/tmp", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )


def _probe(env: dict, devices: list[str], *args: str) -> dict:
    done = _srun(env, *args, "/usr/bin/python3", "-c", PROBE, *devices)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def _at_once(env: dict, devices: list[str], *jobs: tuple[str, ...]) -> list[dict]:
    """The probe as several jobs started together; they must have run at the same time."""
    with ThreadPoolExecutor(len(jobs)) as pool:
        results = list(pool.map(lambda args: _probe(env, devices, *args), jobs))
    assert max(r["started"] for r in results) < min(r["ended"] for r in results), f"not at the same time: {results}"
    return results


def _allowed(result: dict) -> set[str]:
    return {path for path, outcome in result["opened"].items() if outcome == "ENXIO"}


def _cpu_count(cpu_list: str) -> int:
    count = 0
    for part in cpu_list.split(","):
        first, _, last = part.partition("-")
        count += int(last or first) - int(first) + 1
    return count


def gpus_are_confined(env: dict, devices: list[str], report: list[str]) -> None:
    whole = _at_once(env, devices, ("--gres=gpu:1", "-c1"), ("--gres=gpu:1", "-c1"))
    for result in whole:
        report.append(f"$ srun -w {NODE} --gres=gpu:1 -c1 probe   (two at once): {result['opened']}")
        assert len(_allowed(result)) == 1 and set(result["opened"].values()) == {"ENXIO", "EPERM"}, result
    assert _allowed(whole[0]) != _allowed(whole[1]), f"two whole-GPU jobs were given the same GPU: {whole}"

    bare = _probe(env, devices, "-c1")
    report.append(f"$ srun -w {NODE} -c1 probe   (no --gres): {bare['opened']}")
    assert set(bare["opened"].values()) == {"EPERM"}, bare

    # Two shard jobs at once, then a shard job beside a whole-GPU job: each opens only the GPU
    # its shard or GPU is on (Slurm 22.05 may give the whole GPU to a job while another holds one
    # of its shards: docs/known-limits.md).
    shards = _at_once(env, devices, ("--gres=shard:1", "-c1"), ("--gres=shard:1", "-c1"))
    for result in shards:
        report.append(f"$ srun -w {NODE} --gres=shard:1 -c1 probe   (two at once): {result['opened']}")
        assert len(_allowed(result)) == 1, result
    shard, gpu = _at_once(env, devices, ("--gres=shard:1", "-c1"), ("--gres=gpu:1", "-c1"))
    report.append(f"$ srun --gres=shard:1 probe beside srun --gres=gpu:1 probe: {shard['opened']} | {gpu['opened']}")
    assert len(_allowed(shard)) == 1 and len(_allowed(gpu)) == 1, (shard, gpu)


def cores_are_confined(env: dict, devices: list[str], report: list[str]) -> None:
    one, two = _probe(env, [], "-c1"), _probe(env, [], "-c2")
    report.append(f"Cpus_allowed_list: -c1 job {one['cpus']}, -c2 job {two['cpus']}")
    assert _cpu_count(one["cpus"]) == 1 and _cpu_count(two["cpus"]) == 2, (one, two)


def _job_state(env: dict, job: str) -> str:
    done = subprocess.run(["scontrol", "-o", "show", "job", job], capture_output=True, text=True, env=env, timeout=30)
    return next((w.split("=", 1)[1] for w in done.stdout.split() if w.startswith("JobState=")), "")


def _sbatch(env: dict, *args: str) -> str:
    done = subprocess.run(
        ["sbatch", "--parsable", "-w", NODE, "-n1", "-c1", "--chdir=/tmp", "-o", "/dev/null", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
        check=True,
    )
    return done.stdout.strip().split(";")[0]


def memory_is_confined(env: dict, report: list[str]) -> None:
    hog = _sbatch(env, "--mem=64", "--wrap", "/usr/bin/python3 -c 'x = bytearray(400 * 1024 * 1024); print(len(x))'")
    neighbour = _sbatch(env, "--mem=64", "--wrap", "sleep 5; echo fine")
    deadline = time.monotonic() + 120
    states = {}
    while time.monotonic() < deadline:
        states = {job: _job_state(env, job) for job in (hog, neighbour)}
        if all(s and s not in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING") for s in states.values()):
            break
        time.sleep(1)
    report.append(f"--mem=64 job allocating 400 MB: {states[hog]}; its neighbour on {NODE}: {states[neighbour]}")
    assert states == {hog: "OUT_OF_MEMORY", neighbour: "COMPLETED"}, states


def strays_end_with_their_job(cluster: str, env: dict, report: list[str]) -> None:
    marker = "4242.5"  # sleep's argument: no other process in the node sleeps that long
    done = _srun(env, "-c1", "sh", "-c", f"setsid sleep {marker} </dev/null >/dev/null 2>&1 & sleep 1; exit 0")
    assert done.returncode == 0, done.stderr
    container = f"{cluster}-{NODE}"
    left = ""
    for _ in range(20):
        left = subprocess.run(
            ["lxc-attach", "-n", container, "--", "pgrep", "-f", f"sleep {marker}"], capture_output=True, text=True
        ).stdout.strip()
        if not left:
            break
        time.sleep(0.5)
    report.append(f"a job's double-forked sleeper after the job ended: {'still there: ' + left if left else 'gone'}")
    assert not left, f"the job's stray process {left} outlived it"


def jobs_are_contained(cluster: str, env: dict, report: list[str]) -> None:
    # (the cluster's srun runs in its container with a PATH of its own, which the jobs get)
    devices = ["/dev/nvidia5", "/dev/nvidia6"]
    gpus_are_confined(env, devices, report)
    cores_are_confined(env, devices, report)
    memory_is_confined(env, report)
    strays_end_with_their_job(cluster, env, report)
