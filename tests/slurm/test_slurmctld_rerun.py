"""What a re-run of slurmctld's create does to running jobs (components/files/lib/slurm.sh):
the same slurm.conf touches no daemon; a changed node line restarts slurmctld, and a node whose
CPUs change is named (Slurm ends the jobs of a node whose core count changed)."""

import json
import os
import subprocess
from pathlib import Path

from components.common.transport import helpers, script
from components.slurm.controller import FILES
from components.slurm.slurm_conf import render_cgroup_conf
from tests.harness.program_harness import run_program, stack_config
from tests.upgrade.snapshot import release_stack_config

SNAPSHOT = Path(__file__).resolve().parents[1] / "upgrade" / "snapshots" / "e2e.json"


def cpus_changed(old: str, new: str) -> str:
    done = subprocess.run(
        ["/bin/bash", "-c", f'{helpers()}\ncpus_changed "$@"', "test", old, new], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def release_conf() -> str:
    """slurm.conf of the e2e stack as the last release rendered it."""
    resources = json.loads(SNAPSHOT.read_text())["resources"]
    (slurmctld,) = [r for r in resources if r["name"] == "e2e-slurm-slurmctld"]
    return slurmctld["inputs"]["environment"]["SLURM_CONF_TEXT"]


def current_conf(config: dict) -> str:
    (slurmctld,) = [r for r in run_program(config, stack="e2e").resources if r.name == "e2e-slurm-slurmctld"]
    return slurmctld.inputs["environment"]["SLURM_CONF_TEXT"]


def test_the_nodes_whose_cpus_change_are_named():
    old = release_conf()
    assert cpus_changed(old, current_conf(stack_config("e2e"))) == "c000 c001 c002 c003", "1 -> 2 CPUs each"
    commit = json.loads(SNAPSHOT.read_text())["commit"]
    assert cpus_changed(old, current_conf(release_stack_config(commit, "e2e"))) == ""
    lines = "NodeName=a NodeAddr=10.0.0.1 CPUs=1\nNodeName=b NodeAddr=10.0.0.2\nNodeName=c CPUs=4\n"
    assert cpus_changed(lines, lines.replace(" CPUs=1", "")) == "", "no CPUs= is 1 CPU"
    assert cpus_changed(lines, lines.replace("CPUs=4", "CPUs=8")) == "c"
    assert cpus_changed(lines, "NodeName=a CPUs=1\nNodeName=d CPUs=9\n") == "", "added or removed nodes are not listed"
    assert cpus_changed("", lines) == ""


# slurmctld runs in its container: files the create writes there land under $ROOT; what would
# restart or reconfigure it is recorded.
FAKES = """
report_clone() { :; }
stop_other_slurmctld() { :; }
restore_ct_slurmctld() { :; }
ct_setup_munge() { return 1; }
wait_until() { :; }
in_ct() {
  shift
  case "$1 ${2-}" in
    "cat "*) cat "$ROOT$2" ;;
    "systemctl restart") echo "systemctl restart ${3-}" >> "$CALLS" ;;
    "systemctl "*) ;;
    "scontrol "*) echo "scontrol $2" >> "$CALLS" ;;
    "/bin/sh -c") printf '%s\n' "$3" >> "$CALLS.sh" ;;
    *) echo "in_ct $*" >> "$CALLS" ;;
  esac
}
ct_write_if_changed() {
  local path="$ROOT$2" tmp
  mkdir -p "$(dirname "$path")"
  tmp=$(mktemp)
  cat > "$tmp"
  if [ -f "$path" ] && cmp -s "$tmp" "$path"; then rm -f "$tmp"; return 1; fi
  mv -f "$tmp" "$path"
}
"""
DROP_IN = "[Unit]\nStartLimitIntervalSec=0\n[Service]\nRestart=on-failure\nRestartSec=5\nOOMScoreAdjust=-1000\n"


def rerun_create(tmp_path: Path, on_disk: str, conf: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    """slurmctld_container_create.sh over a running slurmctld whose slurm.conf is `on_disk`."""
    root = tmp_path / "root"
    etc = root / "etc" / "slurm"
    etc.mkdir(parents=True)
    (etc / "slurm.conf").write_text(on_disk)
    (etc / "gres.conf").write_text("")
    (etc / "cgroup.conf").write_text(render_cgroup_conf())
    drop_in = root / "etc/systemd/system/slurmctld.service.d/gpucluster.conf"
    drop_in.parent.mkdir(parents=True)
    drop_in.write_text(DROP_IN.replace("\\n", "\n"))
    calls = tmp_path / "calls"
    calls.touch()
    header = "# ---- slurmctld_container_create.sh ----"
    text = script(FILES / "slurmctld_container_create.sh").replace(header, FAKES + header)
    assert FAKES in text
    environment = {
        "CLUSTER_DIR": str(tmp_path),
        "CONTAINER": "e2e-c000",
        "SLURM_CONF_TEXT": conf,
        "GRES_CONF_TEXT": "",
        "CGROUP_CONF_TEXT": render_cgroup_conf(),
        "ROOT": str(root),
        "CALLS": str(calls),
        "PATH": os.environ["PATH"],
    }
    done = subprocess.run(["/bin/bash", "-c", text], env=environment, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    return done, calls.read_text().splitlines()


def test_the_same_slurm_conf_restarts_and_reconfigures_nothing(tmp_path):
    conf = release_conf()
    done, calls = rerun_create(tmp_path, conf, conf)
    assert calls == []
    assert "CPUs" not in done.stderr


def test_slurmctld_and_munged_are_the_last_the_oom_killer_picks(tmp_path):
    conf = current_conf(stack_config("e2e"))
    rerun_create(tmp_path, conf, conf)
    drop_in = tmp_path / "root/etc/systemd/system/slurmctld.service.d/gpucluster.conf"
    assert "OOMScoreAdjust=-1000" in drop_in.read_text().splitlines()
    # The running ones take it at once: a shell in the container writes each one's score.
    shell = (tmp_path / "calls.sh").read_text()
    assert "for unit in slurmctld munge" in shell and 'echo -1000 2>/dev/null > "/proc/$pid/oom_score_adj"' in shell


def test_a_partition_change_reconfigures(tmp_path):
    conf = release_conf()
    _, calls = rerun_create(tmp_path, conf, conf.replace("OverSubscribe=YES", "OverSubscribe=NO"))
    assert calls == ["scontrol reconfigure"]


def test_changed_cpus_restart_slurmctld_and_name_the_nodes_whose_jobs_end(tmp_path):
    old = release_conf()
    done, calls = rerun_create(tmp_path, old, current_conf(stack_config("e2e")))
    assert calls == ["systemctl restart slurmctld"]
    assert "CPUs of c000 c001 c002 c003 change: Slurm ends the jobs running there" in done.stderr
