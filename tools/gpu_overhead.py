"""GPU overhead of a node container against its host: the same measurements on the host, in a
node, and on the host again (so drift of the machine shows), several trials each; a table of
median [min-max] and the ratio node / mean(host medians).

    venv/bin/python tools/gpu_overhead.py CONTAINER [--trials 5] [--size 8192] [--json FILE]

CONTAINER is a node's LXC name (e.g. gpu-c000), run as root on its host. Measured with the
CUDA driver API and cuBLAS through ctypes, so the same code runs on the host and in the node
without PyTorch: a bf16 SIZE^3 matrix multiply (cublasGemmEx, fp32 accumulation) in TFLOP/s,
and a device-to-device copy of 1 GiB (cuMemcpyDtoD) in GB/s, each trial timed with CUDA events
after a warm-up. cuBLAS comes from the CUDA toolkit (gpu.cuda_path, bound into the nodes) or
pip's nvidia-cublas; without it the matmul is skipped, with the reason. The H100 numbers of
docs/gpu.md were measured on 2026-11-25 (PyTorch there; the method here is the same kernel);
its H200 numbers (2026-11-26) with this script.
"""

import argparse
import json
import statistics
import subprocess
import sys

# Runs on the host and in the node (python3 only): prints one JSON object.
PROBE = r"""
import ctypes, glob, json, os, sys
trials, size = int(sys.argv[1]), int(sys.argv[2])
out = {"matmul_tflops": [], "d2d_gbps": [], "notes": []}
try:
    cuda = ctypes.CDLL("libcuda.so.1")
except OSError as error:
    print(json.dumps({"error": f"libcuda.so.1 cannot be loaded: {error}"}))
    sys.exit(2)
U64, SIZE, VOID = ctypes.c_uint64, ctypes.c_size_t, ctypes.c_void_p
cuda.cuMemAlloc_v2.argtypes = [ctypes.POINTER(U64), SIZE]
cuda.cuMemsetD32_v2.argtypes = [U64, ctypes.c_uint, SIZE]
cuda.cuMemcpyDtoD_v2.argtypes = [U64, U64, SIZE]
cuda.cuMemFree_v2.argtypes = [U64]
def check(call, *args):
    result = getattr(cuda, call)(*args)
    if result:
        print(json.dumps({"error": f"{call} failed: CUDA error {result}"}))
        sys.exit(2)
check("cuInit", 0)
device, context = ctypes.c_int(), ctypes.c_void_p()
check("cuDeviceGet", ctypes.byref(device), 0)
name = ctypes.create_string_buffer(256)
check("cuDeviceGetName", name, 256, device)
out["device"] = name.value.decode()
check("cuCtxCreate_v2", ctypes.byref(context), 0, device)
start, stop = ctypes.c_void_p(), ctypes.c_void_p()
check("cuEventCreate", ctypes.byref(start), 0)
check("cuEventCreate", ctypes.byref(stop), 0)
def timed(run, repeat):
    run()
    check("cuCtxSynchronize")
    check("cuEventRecord", start, None)
    for _ in range(repeat):
        run()
    check("cuEventRecord", stop, None)
    check("cuEventSynchronize", stop)
    ms = ctypes.c_float()
    check("cuEventElapsedTime", ctypes.byref(ms), start, stop)
    return ms.value / 1000 / repeat
def alloc(nbytes):
    pointer = ctypes.c_uint64()
    check("cuMemAlloc_v2", ctypes.byref(pointer), nbytes)
    return pointer
gib = 1 << 30
first, second = alloc(gib), alloc(gib)
check("cuMemsetD32_v2", first, 0x3C003C00, gib // 4)
for _ in range(trials):
    seconds = timed(lambda: check("cuMemcpyDtoD_v2", second, first, gib), 10)
    out["d2d_gbps"].append(2 * gib / seconds / 1e9)  # read + write, as bandwidth tests count it
check("cuMemFree_v2", first)
check("cuMemFree_v2", second)
candidates = ["libcublas.so", "libcublas.so.13", "libcublas.so.12", "libcublas.so.11"]
candidates += sorted(glob.glob("/usr/local/cuda*/lib64/libcublas.so*"))
for site in sys.path:
    candidates += sorted(glob.glob(os.path.join(site, "nvidia/cublas/lib/libcublas.so*")))
cublas = None
for candidate in candidates:
    try:
        cublas = ctypes.CDLL(candidate)
        break
    except OSError:
        continue
if cublas is None:
    out["notes"].append("matmul skipped: no cuBLAS (libcublas.so) in the CUDA toolkit or pip's nvidia-cublas")
else:
    handle = ctypes.c_void_p()
    if cublas.cublasCreate_v2(ctypes.byref(handle)):
        print(json.dumps({"error": "cublasCreate failed"}))
        sys.exit(2)
    INT = ctypes.c_int
    cublas.cublasGemmEx.argtypes = [VOID, INT, INT, INT, INT, INT, VOID, VOID, INT, INT, VOID, INT, INT,
                                    VOID, VOID, INT, INT, INT, INT]
    nbytes = size * size * 2
    a, b, c = alloc(nbytes), alloc(nbytes), alloc(nbytes)
    for matrix in (a, b):
        check("cuMemsetD32_v2", matrix, 0x3C003C00, nbytes // 4)  # bf16 0.0078 everywhere
    alpha, beta = ctypes.c_float(1.0), ctypes.c_float(0.0)
    alpha_p = ctypes.cast(ctypes.pointer(alpha), VOID)
    beta_p = ctypes.cast(ctypes.pointer(beta), VOID)
    BF16, COMPUTE_32F, DEFAULT = 14, 68, -1
    def gemm():
        status = cublas.cublasGemmEx(
            handle, 0, 0, size, size, size, alpha_p, a.value, BF16, size,
            b.value, BF16, size, beta_p, c.value, BF16, size, COMPUTE_32F, DEFAULT)
        if status:
            print(json.dumps({"error": f"cublasGemmEx failed: status {status}"}))
            sys.exit(2)
    for _ in range(trials):
        seconds = timed(gemm, 20)
        out["matmul_tflops"].append(2 * size ** 3 / seconds / 1e12)
print(json.dumps(out))
"""

METRICS = (
    ("matmul_tflops", "bf16 {size}^3 matmul, TFLOP/s"),
    ("d2d_gbps", "device-to-device copy, 1 GiB, GB/s (read + write)"),
)


def summary(values: list[float]) -> str:
    """median [min-max], one decimal."""
    if not values:
        return "-"
    return f"{statistics.median(values):.1f} [{min(values):.1f}-{max(values):.1f}]"


def ratio(node: list[float], before: list[float], after: list[float]) -> str:
    """node median / mean of the two host medians, three decimals."""
    if not (node and before and after):
        return "-"
    host = (statistics.median(before) + statistics.median(after)) / 2
    return f"{statistics.median(node) / host:.3f}"


def table(runs: dict[str, dict], trials: int, size: int) -> str:
    """The markdown table of the three runs (host before, node, host after)."""
    before, node, after = runs["host before"], runs["node"], runs["host after"]
    lines = [
        "| metric | trials | host before | node | host after | node / mean(host) |",
        "|---|---|---|---|---|---|",
    ]
    for key, label in METRICS:
        cells = [summary(before[key]), summary(node[key]), summary(after[key])]
        cells.append(ratio(node[key], before[key], after[key]))
        lines.append(f"| {label.format(size=size)} | {trials} | {' | '.join(cells)} |")
    notes = sorted({note for run in runs.values() for note in run.get("notes", [])})
    return "\n".join(lines + [f"\n{note}" for note in notes])


def run_probe(argv: list[str], trials: int, size: int, timeout: int = 900) -> dict:
    done = subprocess.run(
        [*argv, "python3", "-c", PROBE, str(trials), str(size)],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    try:
        result = json.loads(done.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        result = {"error": (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]}
    if "error" in result:
        raise SystemExit(f"{' '.join(argv) or 'host'}: {result['error']}")
    return result


def measure(container: str, trials: int, size: int, runner=run_probe) -> dict[str, dict]:
    """Host, node, host: the same probe, one after the other (never at the same time)."""
    node = ["lxc-attach", "-n", container, "--clear-env", "--", "env", "PATH=/usr/bin:/bin"]
    return {
        "host before": runner([], trials, size),
        "node": runner(node, trials, size),
        "host after": runner([], trials, size),
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("container", help="a node's LXC container name (e.g. gpu-c000)")
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--size", type=int, default=8192, help="matrix size of the matmul")
    parser.add_argument("--json", help="also write the raw trials here")
    args = parser.parse_args(argv)
    runs = measure(args.container, args.trials, args.size)
    device = runs["host before"].get("device", "?")
    print(f"{device}: host, node {args.container}, host; {args.trials} trials each, median [min-max]\n")
    print(table(runs, args.trials, args.size))
    if args.json:
        with open(args.json, "w") as out:
            json.dump(runs, out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
