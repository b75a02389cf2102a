"""tools/gpu_overhead.py without a GPU: the order of the runs (host, node, host), the table's
median [min-max] and ratio, and the probe's precise answer where no driver is found."""

import importlib.util
import subprocess
from pathlib import Path

_SPEC = importlib.util.spec_from_file_location(
    "gpu_overhead", Path(__file__).resolve().parents[1] / "tools" / "gpu_overhead.py"
)
gpu_overhead = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(gpu_overhead)


def test_host_node_host_and_the_table():
    calls = []
    trials = {
        "host": [{"matmul_tflops": [701.1, 717.3, 734.7], "d2d_gbps": [2800.0, 2810.0, 2790.0]},
                 {"matmul_tflops": [700.6, 709.6, 746.5], "d2d_gbps": [2805.0, 2795.0, 2800.0]}],
        "node": {"matmul_tflops": [702.4, 717.3, 727.0], "d2d_gbps": [2798.0, 2801.0, 2799.0],
                 "notes": []},
    }  # fmt: skip

    def runner(argv, count, size):
        calls.append((argv, count, size))
        return trials["node"] if argv else trials["host"].pop(0)

    runs = gpu_overhead.measure("gpu-c000", 3, 8192, runner=runner)
    assert [argv[:3] for argv, _, _ in calls] == [[], ["lxc-attach", "-n", "gpu-c000"], []]
    assert list(runs) == ["host before", "node", "host after"]
    text = gpu_overhead.table(runs, 3, 8192)
    assert text.splitlines()[2] == (
        "| bf16 8192^3 matmul, TFLOP/s | 3 | 717.3 [701.1-734.7] | 717.3 [702.4-727.0] | 709.6 [700.6-746.5] | 1.005 |"
    )
    assert text.splitlines()[3].endswith(
        "| 2800.0 [2790.0-2810.0] | 2799.0 [2798.0-2801.0] | 2800.0 [2795.0-2805.0] | 1.000 |"
    )


def test_no_cublas_skips_the_matmul_with_the_reason():
    runs = {
        "host before": {"matmul_tflops": [], "d2d_gbps": [1.0], "notes": ["matmul skipped: no cuBLAS"]},
        "node": {"matmul_tflops": [], "d2d_gbps": [1.0]},
        "host after": {"matmul_tflops": [], "d2d_gbps": [1.0]},
    }
    text = gpu_overhead.table(runs, 1, 8192)
    assert "| bf16 8192^3 matmul, TFLOP/s | 1 | - | - | - | - |" in text
    assert text.endswith("matmul skipped: no cuBLAS")


def test_the_probe_says_why_it_cannot_measure_without_a_driver():
    if Path("/proc/driver/nvidia").exists():
        return
    done = subprocess.run(
        ["python3", "-c", gpu_overhead.PROBE, "1", "256"], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 2
    assert '"error": "libcuda.so.1 cannot be loaded' in done.stdout
