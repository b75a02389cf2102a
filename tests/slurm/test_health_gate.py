"""The health gate (components/slurm/files/health_check.sh) against recording stand-ins of
sinfo, scontrol and srun: which drained nodes fail the apply and which are a warning.

A node counts as (re)started when Slurm reports a slurmd start time the gate has not passed
with yet, whichever host the node is on: nothing of it has to be on the gate's host.
"""

import subprocess
from pathlib import Path

import pytest

from components.common.transport import INTERPRETER, script
from components.slurm.node import FILES as SLURM_FILES

NODES = "c[000-003]"

SINFO = r"""#!/bin/bash
# sinfo -h -N [-n NODES] [-t STATE] -o FORMAT, from the state file: "NODE STATE GRES REASON"
fmt= wanted_state= wanted_node=
while [ $# -gt 0 ]; do
  case $1 in -o) fmt=$2; shift ;; -t) wanted_state=$2; shift ;; -n) wanted_node=$2; shift ;; esac
  shift
done
# After a test job its nodes are completing while a countdown lasts (each such query counts down).
if [ "$wanted_state" = completing ]; then
  left=$(cat "$STATE_FILE.completing" 2>/dev/null || echo 0)
  echo "completing asked, $left left" >> "$STATE_FILE.asked"
  [ "$left" -gt 0 ] && { echo "$((left - 1))" > "$STATE_FILE.completing"; echo c000; }
  exit 0
fi
while read -r node state gres reason; do
  [ -z "$wanted_state" ] || [ "$state" = "$wanted_state" ] || continue
  case $wanted_node in *'['* | '') ;; *) [ "$node" = "$wanted_node" ] || continue ;; esac
  case $fmt in
    '%N %T') echo "$node $state" ;; '%E') echo "$reason" ;; '%N') echo "$node" ;;
    '%N %G') echo "$node $gres" ;; '%G') echo "$gres" ;;
  esac
done < "$STATE_FILE"
"""

SCONTROL = r"""#!/bin/bash
# scontrol -o show node NODES: one line per node, its slurmd's start time from the starts file.
while read -r node started; do
  echo "NodeName=$node Arch=x86_64 CoresPerSocket=1 State=IDLE SlurmdStartTime=$started LastBusyTime=None"
done < "$STARTS_FILE"
"""

SRUN = r"""#!/bin/bash
# srun ... -w NODELIST COMMAND: each node of the list answers (hostname), or CUDA_VISIBLE_DEVICES.
nodes=
while [ $# -gt 0 ]; do case $1 in -w) nodes=$2; shift ;; --*=* | -N) ;; *) last=$1 ;; esac; shift; done
case $last in printenv) echo 0 ;; *) tr ',' '\n' <<< "$nodes" ;; esac
[ -z "${EPILOG_QUERIES:-}" ] || echo "$EPILOG_QUERIES" > "$STATE_FILE.completing"
"""


@pytest.fixture
def gate(tmp_path: Path):
    """Run the gate as its command does, with Slurm's answers set by the test: the stand-ins are
    the host's Slurm client, where the program puts its wrappers (the cluster directory's bin/)."""
    cluster_dir = tmp_path / "cluster"
    bin_dir = cluster_dir / "bin"
    bin_dir.mkdir(parents=True)
    for name, text in (("sinfo", SINFO), ("scontrol", SCONTROL), ("srun", SRUN)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    state, starts = tmp_path / "state", tmp_path / "starts"

    def run(nodes: dict[str, tuple[str, str]], reason: str = "gpu-health: /dev/nvidia1 missing", epilog: int = 0):
        """nodes: name -> (state, slurmd start time)."""
        state.write_text(
            "".join(f"{n} {s} gpu:1 {reason if 'drain' in s else 'none'}\n" for n, (s, _) in nodes.items())
        )
        starts.write_text("".join(f"{n} {t}\n" for n, (_, t) in nodes.items()))
        return subprocess.run(
            [*INTERPRETER, script(SLURM_FILES / "health_check.sh")],
            env={
                "PATH": "/usr/bin:/bin",
                "CLUSTER_DIR": str(cluster_dir),
                "NODES": NODES,
                "STATE_FILE": str(state),
                "STARTS_FILE": str(starts),
                "EPILOG_QUERIES": str(epilog) if epilog else "",
            },
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    return run, cluster_dir


T0, T1 = "2026-11-23T10:00:00", "2026-11-23T11:30:07"


def healthy() -> dict[str, tuple[str, str]]:
    return {node: ("idle", T0) for node in ("c000", "c001", "c002", "c003")}


def test_every_node_is_new_at_the_first_gate_and_is_remembered_once_it_passed(gate):
    run, cluster_dir = gate
    done = run(healthy())
    assert done.returncode == 0, done.stderr
    assert "healthy: every node serves; 4 idle node(s) answered srun" in done.stdout
    assert (cluster_dir / "health-passed").read_text().split("\n")[:4] == [f"c00{i} {T0}" for i in range(4)]


def test_a_node_of_another_host_restarted_since_the_gate_passed_must_serve(gate):
    """c002 runs on another host: its slurmd create left nothing on the gate's host. Its new
    start time alone makes it a node this update (re)started, and drained it fails the gate."""
    run, _ = gate
    assert run(healthy()).returncode == 0
    nodes = {**healthy(), "c002": ("drained", T1)}
    done = run(nodes)
    assert done.returncode == 1
    assert "node c002 was just (re)started but is drained" in done.stderr


def test_a_node_drained_without_a_restart_is_a_warning(gate):
    run, _ = gate
    assert run(healthy()).returncode == 0
    done = run({**healthy(), "c002": ("drained", T0)})
    assert done.returncode == 0, done.stderr
    assert "warning: node c002 is drained (gpu-health: /dev/nvidia1 missing); not testing it" in done.stderr
    assert "3 idle node(s) answered srun" in done.stdout


def test_a_failed_gate_remembers_nothing(gate):
    """The restarted node that failed the gate fails the next one too, until it serves."""
    run, _ = gate
    assert run(healthy()).returncode == 0
    nodes = {**healthy(), "c003": ("drained", T1)}
    assert run(nodes).returncode == 1
    assert run(nodes).returncode == 1
    assert run({**healthy(), "c003": ("idle", T1)}).returncode == 0
    assert run({**healthy(), "c003": ("drained", T1)}).returncode == 0


def test_the_gate_ends_once_its_test_jobs_epilogs_have(gate, tmp_path):
    """After the test jobs their nodes stay completing while the epilogs run (Pyxis' among
    them): `up` returns with them idle, so the first sinfo a person types shows them idle."""
    run, _ = gate
    done = run(healthy(), epilog=3)
    assert done.returncode == 0, done.stderr
    asked = (tmp_path / "state.asked").read_text().splitlines()
    assert asked == ["completing asked, 3 left", "completing asked, 2 left", "completing asked, 1 left",
                     "completing asked, 0 left"]  # fmt: skip
