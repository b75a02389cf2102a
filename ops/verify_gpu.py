"""GPU acceptance check of a stack's cluster: `./verify.sh STACK [HOST] --gpu`.

Runs through Slurm, as jobs run: one job per node of this host (`srun -w NODE --gres=gpu:N`,
all its GPUs allocated), which checks inside the node that
  - each allocated GPU's device node (gres.conf's File=) opens;
  - the host's other GPUs (their numbers, made with mknod in the job) do not open: the node's
    devices cgroup refuses them;
  - `nvidia-smi -L` lists as many GPUs as the node's GRES;
  - a small CUDA computation succeeds where the node has the driver's libcuda.so.1 (a buffer
    written on each GPU by cuMemsetD32, copied on the device, read back and compared), or
    says precisely why it cannot run.
Stand-in GPUs (no driver behind NVIDIA's major 195) have no nvidia-smi and no CUDA: the check
says "stand-ins: skipped" for those parts, never a pass. Exit status 1 on any FAIL.
"""

import json
import os
import subprocess
import sys
from dataclasses import dataclass

from components.common.rendering import container_device_path
from components.composition.config import ClusterConfig

# Runs in the node (python3 is in the node image), as root in a Slurm job. Prints one line per
# check: "<status> <text>", status ok, FAIL or skipped.
PROBE = r"""
import ctypes, errno, json, os, shutil, subprocess, sys, tempfile
spec = json.loads(sys.argv[1])
def say(status, text):
    print(f"{status} {text}", flush=True)
stand_ins = 0
for path in spec["gpus"]:
    try:
        os.close(os.open(path, os.O_RDWR))
        say("ok", f"{path} (allocated) opens")
    except OSError as error:
        if error.errno == errno.ENXIO:
            stand_ins += 1
            say("ok", f"{path} (allocated) opens as far as a stand-in goes (ENXIO: no driver behind it)")
        else:
            say("FAIL", f"{path} (allocated) cannot be opened: {error.strerror}")
scratch = tempfile.mkdtemp(prefix="gpucluster-gpu-check-")
try:
    for index, (major, minor) in enumerate(spec["others"]):
        path = os.path.join(scratch, f"other{index}")
        try:
            os.mknod(path, 0o20600, os.makedev(major, minor))
            os.close(os.open(path, os.O_RDWR))
            say("FAIL", f"another GPU of the host ({major}:{minor}, not this node's) opens in the node")
        except OSError as error:
            if error.errno in (errno.EPERM, errno.EACCES):
                say("ok", f"another GPU of the host ({major}:{minor}) does not open: {error.strerror}")
            else:
                say("FAIL", f"another GPU of the host ({major}:{minor}): {error.strerror}, "
                    "not refused by the devices cgroup")
finally:
    shutil.rmtree(scratch, ignore_errors=True)
if spec["gpus"] and stand_ins == len(spec["gpus"]):
    say("skipped", "stand-ins: skipped nvidia-smi -L and the CUDA computation (stand-in GPUs, no driver behind them)")
    sys.exit(0)
smi = shutil.which("nvidia-smi")
if smi is None:
    say("FAIL", "nvidia-smi is not on PATH in the node: the driver's files are not bound "
        "(gpu.driver_files; the container create log names what was found)")
else:
    done = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=60)
    listed = [line for line in done.stdout.splitlines() if line.startswith("GPU ")]
    if done.returncode != 0:
        say("FAIL", f"nvidia-smi -L failed: {(done.stdout + done.stderr).strip().splitlines()[-1:]}")
    elif len(listed) != spec["gres"]:
        say("FAIL", f"nvidia-smi -L lists {len(listed)} GPUs, the node's GRES is gpu:{spec['gres']}")
    else:
        say("ok", f"nvidia-smi -L lists {len(listed)} GPUs = GRES gpu:{spec['gres']}")
try:
    cuda = ctypes.CDLL("libcuda.so.1")
except OSError as error:
    say("FAIL", f"CUDA: libcuda.so.1 cannot be loaded in the node ({error}): "
        "the driver's libraries are not where its loader looks")
    sys.exit(0)
U64, SIZE = ctypes.c_uint64, ctypes.c_size_t
cuda.cuMemAlloc_v2.argtypes = [ctypes.POINTER(U64), SIZE]
cuda.cuMemsetD32_v2.argtypes = [U64, ctypes.c_uint, SIZE]
cuda.cuMemcpyDtoD_v2.argtypes = [U64, U64, SIZE]
cuda.cuMemcpyDtoH_v2.argtypes = [ctypes.c_void_p, U64, SIZE]
cuda.cuMemFree_v2.argtypes = [U64]
def check(call, *args):
    result = getattr(cuda, call)(*args)
    if result != 0:
        name = ctypes.c_char_p()
        cuda.cuGetErrorName(result, ctypes.byref(name))
        raise RuntimeError(f"{call}: {name.value.decode() if name.value else result}")
try:
    check("cuInit", 0)
    count = ctypes.c_int()
    check("cuDeviceGetCount", ctypes.byref(count))
    if count.value != spec["gres"]:
        say("FAIL", f"CUDA sees {count.value} GPUs, the node's GRES is gpu:{spec['gres']}")
    words = 4 << 20  # 16 MiB of 32-bit words
    for ordinal in range(count.value):
        device, context = ctypes.c_int(), ctypes.c_void_p()
        check("cuDeviceGet", ctypes.byref(device), ordinal)
        check("cuCtxCreate_v2", ctypes.byref(context), 0, device)
        first, second = ctypes.c_uint64(), ctypes.c_uint64()
        check("cuMemAlloc_v2", ctypes.byref(first), words * 4)
        check("cuMemAlloc_v2", ctypes.byref(second), words * 4)
        pattern = 0x5A17C0DE + ordinal
        check("cuMemsetD32_v2", first, pattern, words)
        check("cuMemcpyDtoD_v2", second, first, words * 4)
        back = (ctypes.c_uint32 * words)()
        check("cuMemcpyDtoH_v2", ctypes.cast(back, ctypes.c_void_p), second, words * 4)
        check("cuCtxSynchronize")
        wrong = sum(1 for value in back[:: 4096] if value != pattern)
        check("cuMemFree_v2", first)
        check("cuMemFree_v2", second)
        check("cuCtxDestroy_v2", context)
        if wrong:
            say("FAIL", f"CUDA: GPU {ordinal} read back wrong values")
        else:
            say("ok", f"CUDA: GPU {ordinal} wrote 16 MiB, copied it on the device and read it back intact")
except RuntimeError as error:
    say("FAIL", f"CUDA computation failed: {error}")
"""


@dataclass(frozen=True)
class NodeGpus:
    name: str
    gpus: list[str]  # host device paths (the node's GRES)
    others: list[str]  # the host's other GPUs
    partition: str | None  # a partition the node is in (the job runs there)


def node_gpus(cluster: ClusterConfig, host: str | None = None) -> list[NodeGpus]:
    """The nodes with GPUs of this host (default: the only one), with their GPUs and the others."""
    chosen = cluster.host_named(host) if host else cluster.cluster_hosts[0]
    assignment = cluster.gpu_assignment()
    nodes = [n for n in cluster.nodes if cluster.node_host(n).name == chosen.name and assignment[n.name]]
    devices = chosen.gpu.devices

    def partition(node: str) -> str | None:
        return next((p.name for p in cluster.slurm.partitions if p.nodes is None or node in p.nodes), None)

    return [
        NodeGpus(n.name, assignment[n.name], [d for d in devices if d not in assignment[n.name]], partition(n.name))
        for n in nodes
    ]


def _numbers(path: str) -> list[int] | None:
    try:
        rdev = os.stat(path).st_rdev
    except OSError:
        return None
    return [os.major(rdev), os.minor(rdev)]


def check_node(node: NodeGpus, client: str, timeout: int = 300) -> tuple[bool, list[str]]:
    """The probe as a Slurm job on the node, by the host's Slurm client (`client`: the directory
    of wrappers running the node image's commands): (passed, its report lines)."""
    others = [n for n in (_numbers(path) for path in node.others) if n is not None]
    spec = {"gpus": [container_device_path(p) for p in node.gpus], "others": others, "gres": len(node.gpus)}
    argv = [
        f"{client}/srun", "--quiet", f"--nodelist={node.name}", "--nodes=1", "--ntasks=1",
        *([f"--partition={node.partition}"] if node.partition else []), f"--gres=gpu:{len(node.gpus)}",
        "--time=5", "--job-name=gpu-check", "python3", "-c", PROBE, json.dumps(spec),
    ]  # fmt: skip
    try:
        done = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return False, [f"{node.name}: FAIL     the job did not finish within {timeout} s (is the node up: sinfo?)"]
    lines = []
    for line in done.stdout.splitlines():
        status, _, text = line.partition(" ")
        lines.append(f"{node.name}: {status:<8} {text}")
    passed = done.returncode == 0 and bool(lines) and not any(" FAIL " in line for line in lines)
    if done.returncode != 0 or not lines:
        error = (done.stderr.strip().splitlines() or ["no output"])[-1]
        lines.append(f"{node.name}: FAIL     srun exited {done.returncode}: {error}")
    return passed, lines


def slurm_client(cluster: ClusterConfig, host) -> str:
    """The host's Slurm client: its directory of wrappers running the node image's commands."""
    return f"{cluster.host_identity(host).cluster_dir}/bin"


def verify_gpus(cluster: ClusterConfig, host: str | None = None, out=sys.stdout) -> int:
    """Check every node's GPUs of this host through Slurm; exit status 1 on any failure."""
    chosen = cluster.host_named(host) if host else cluster.cluster_hosts[0]
    client = slurm_client(cluster, chosen)
    nodes = node_gpus(cluster, host)
    if not nodes:
        print("no node of this host has GPUs: nothing to check", file=out)
        return 0
    results = []
    for node in nodes:
        passed, lines = check_node(node, client)
        results.append(passed)
        for line in lines:
            print(line, file=out, flush=True)
    stand_ins = chosen.gpu.stand_in is not None
    verdict = "passed" if all(results) else "FAILED"
    what = "device checks (stand-ins: nvidia-smi and CUDA skipped)" if stand_ins else "GPU checks"
    print(f"{what} {verdict} on {sum(results)} of {len(results)} nodes", file=out)
    return 0 if all(results) else 1
