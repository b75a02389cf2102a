"""tools/gpu_node_check/check.sh on a machine without a GPU, its GPU and LXC steps stubbed: it
refuses to start when the stack's shared_dir exists, and removes only what it made (its
`mktemp -d` and the part of shared_dir's path it created). It runs as `nobody` (as root here)
in a temporary copy of the tool: nothing outside that copy can change."""

import importlib.util
import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.harness.program_harness import ROOT

STUBS = ("nvidia-smi", "unshare", "dpkg")


@pytest.fixture
def sandbox():
    top = Path(tempfile.mkdtemp(prefix="gpu-node-check-test."))
    try:
        repo = top / "repo"
        # Not prepare.py's work/ of this checkout: each test writes its own.
        shutil.copytree(
            ROOT / "tools" / "gpu_node_check", repo / "tools" / "gpu_node_check", ignore=shutil.ignore_patterns("work")
        )
        shutil.copytree(ROOT / "components" / "files" / "lib", repo / "components" / "files" / "lib")
        (top / "bin").mkdir()
        for name in STUBS:  # each records its arguments and the scratch directory it was given
            stub = top / "bin" / name
            stub.write_text(f'#!/bin/sh\necho "{name} $* SCRATCH=${{SCRATCH:-}}" >> {top}/calls\n')
            stub.chmod(0o755)
        (top / "tmp").mkdir()
        (top / "out").mkdir()
        for path in (top, *top.rglob("*")):
            path.chmod(0o777 if path.is_dir() else 0o755)
        yield top
    finally:
        shutil.rmtree(top, ignore_errors=True)


def commands(top: Path, shared: Path) -> None:
    """prepare.py's commands.json, with the stack's shared_dir at `shared` and no-op scripts."""
    work = top / "repo" / "tools" / "gpu_node_check" / "work"
    work.mkdir(exist_ok=True)
    command = {"create": "/bin/true", "interpreter": ["/bin/sh"], "environment": {"SHARED_DIR": str(shared)}}
    names = ("dev-host-preflight", "dev-c000-lxc", "dev-c001-lxc")
    (work / "commands.json").write_text(json.dumps({name: command for name in names}))
    debs = work / "slurm-debs"
    debs.mkdir()
    (debs / "slurmd_22.05.8_amd64.deb").write_text("")
    for path in (work, debs):
        os.chmod(path, 0o777)
    os.chmod(work / "commands.json", 0o644)


def check(top: Path) -> subprocess.CompletedProcess:
    drop = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"] if os.geteuid() == 0 else []
    env = {"PATH": f"{top}/bin:/usr/sbin:/usr/bin:/sbin:/bin", "OUT": f"{top}/out", "TMPDIR": f"{top}/tmp"}
    return subprocess.run(
        [*drop, "bash", "tools/gpu_node_check/check.sh"],
        cwd=top / "repo",
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_an_existing_shared_dir_is_refused_before_anything_runs(sandbox):
    shared = sandbox / "srv" / "gpucluster" / "dev" / "shared"
    shared.mkdir(parents=True)
    (shared / "a cluster's file").write_text("kept\n")
    commands(sandbox, shared)
    done = check(sandbox)
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"error: {shared} exists already" in done.stderr
    assert (shared / "a cluster's file").read_text() == "kept\n"
    assert not (sandbox / "calls").exists(), "it ran steps after all"
    assert list((sandbox / "tmp").iterdir()) == []


def test_it_removes_what_it_made_and_nothing_else(sandbox):
    srv = sandbox / "srv"
    srv.mkdir()
    (srv / "other").write_text("kept\n")
    os.chmod(srv, 0o777)
    shared = srv / "gpucluster" / "dev" / "shared"
    commands(sandbox, shared)
    done = check(sandbox)
    assert done.returncode == 0, done.stdout + done.stderr
    calls = (sandbox / "calls").read_text().splitlines()
    # The GPU and LXC steps ran, the second part with the check's scratch directory.
    [part_two] = [c for c in calls if c.startswith("unshare ")]
    scratch = part_two.rsplit("SCRATCH=", 1)[1]
    assert Path(scratch).parent == sandbox / "tmp", part_two
    assert any(c.startswith("dpkg -x ") and f" {scratch}/lxc-install " in c for c in calls), calls
    # Debian's Slurm and munge unpacked in the scratch directory too, nowhere else.
    unpacked = [c for c in calls if c.startswith("dpkg -x ") and "/slurm-debs/" in c]
    assert [c.split()[3] for c in unpacked] == [f"{scratch}/slurm-install"], calls
    # What it made is gone (its scratch directory, srv/gpucluster); what was there stays.
    assert sorted(p.name for p in srv.iterdir()) == ["other"]
    assert list((sandbox / "tmp").iterdir()) == []
    log = (sandbox / "out" / "log.txt").read_text()
    assert f"removing what this check made: {scratch} {srv / 'gpucluster'}" in log


def test_the_scripts_name_no_fixed_path_to_make_or_remove():
    """Everything the check makes lies under its scratch directory or the stack's shared_dir."""
    for name in ("check.sh", "in_namespace.sh", "common.sh", "slurm_check.sh", "containers_check.sh"):
        text = (ROOT / "tools" / "gpu_node_check" / name).read_text()
        for fixed in ("/opt/lxc", "/var/lib/lxcdev", "/tmp/ct", "/tmp/lxcbin", "/srv/gpucluster"):
            assert fixed not in text, f"{name} names {fixed}"


# The Slurm step (slurm_check.sh), on the stack's rendered files (prepare.py's work/slurm).


@pytest.fixture(scope="module")
def slurm_files():
    """prepare.py's commands.json and slurm/, written to a temporary directory (no download)."""
    top = Path(tempfile.mkdtemp(prefix="gpu-node-check-prepare."))
    try:
        spec = importlib.util.spec_from_file_location("prepare", ROOT / "tools" / "gpu_node_check" / "prepare.py")
        prepare = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(prepare)
        prepare.write_commands(top)
        yield top
    finally:
        shutil.rmtree(top, ignore_errors=True)


def test_prepare_writes_the_stacks_slurm_files_with_the_containment_lines(slurm_files):
    slurm = slurm_files / "slurm"
    assert sorted(p.name for p in slurm.iterdir()) == [
        "cgroup.conf",
        "env.json",
        "gres.conf",
        "plugstack.conf",
        "slurm.conf",
    ]
    # Jobs in container images: Pyxis (`required`) and the prolog that makes each person's Enroot directories.
    assert "required spank_pyxis.so" in (slurm / "plugstack.conf").read_text()
    conf = (slurm / "slurm.conf").read_text().splitlines()
    for line in (
        "ProctrackType=proctrack/cgroup",
        "TaskPlugin=task/cgroup,task/affinity",
        "SelectTypeParameters=CR_Core_Memory",
        "SlurmctldParameters=enable_configless",
    ):
        assert line in conf
    assert any(line.startswith("NodeName=c000 ") and "Gres=gpu:1" in line for line in conf)
    cgroup = (slurm / "cgroup.conf").read_text().splitlines()
    for line in ("CgroupPlugin=autodetect", "ConstrainCores=yes", "ConstrainDevices=yes", "ConstrainRAMSpace=yes"):
        assert line in cgroup
    assert "ConstrainSwapSpace=yes" in cgroup
    assert "NodeName=c000 Name=gpu File=/dev/nvidia0" in (slurm / "gres.conf").read_text()
    env = json.loads((slurm / "env.json").read_text())
    assert {n: e["CONTAINER"] for n, e in env["slurmd"].items()} == {"c000": "dev-c000", "c001": "dev-c001"}
    assert env["cluster_dir"] == "/var/lib/gpucluster/dev"


# Stand-ins for the unpacked programs: each records its arguments (NUL-terminated: the probe
# is one argument of many lines); slurmctld leaves a process behind, as the daemon, which the
# check stops; srun answers as the node's job would (`leak`: the GPU listed without --gres too).
FAKE = r"""#!/bin/sh
name=$(basename "$0")
printf '%s\0' "$name $*" >> "$CALLS"
case "$name" in
  slurmctld) sleep 60 >/dev/null 2>&1 & echo $! > "$(sed -n 's/^SlurmctldPidFile=//p' "$2")" ;;
  sinfo) printf 'c000 idle\nc001 idle\n' ;;
  srun)
    case "$*" in
      *python3*) echo "ok /dev/nvidia0 (allocated) opens"; echo "ok CUDA: GPU 0 wrote 16 MiB ... intact" ;;
      *--container-image=*os-release*) echo 'PRETTY_NAME="gpucluster GPU check image (python3)"' ;;
      *nvidia-smi*)
        case "$* $LEAK" in
          *--gres=gpu:1*|*leak*) echo "GPU 0: NVIDIA H200 (UUID: GPU-1)" ;;
          *) echo "No devices were found"; exit 6 ;;
        esac ;;
      *) echo "/proc/self/cgroup: 0::/system.slice/slurmstepd.scope/job_3/step_0/user/task_0 (cgroup2fs)" ;;
    esac ;;
esac
exit 0
"""


def containers_work(folder: Path) -> None:
    """prepare.py's containers/, in small: Enroot's tree with Pyxis, an image file, no debs."""
    tree = folder / "tree"
    for path, text in (
        ("etc/enroot/enroot.conf", "# Enroot's default\n"),
        ("usr/local/bin/enroot", "#!/bin/sh\n"),
        ("usr/lib/x86_64-linux-gnu/slurm-wlm/spank_pyxis.so", "pyxis\n"),
    ):
        (tree / path).parent.mkdir(parents=True, exist_ok=True)
        (tree / path).write_text(text)
    subprocess.run(["tar", "-C", str(tree), "-cf", str(folder / "enroot.tar"), "."], check=True)
    shutil.rmtree(tree)
    (folder / "debs").mkdir()
    (folder / "probe.sqsh").write_text("squashfs\n")


def slurm_check(sandbox: Path, work: Path, leak: str = "") -> tuple[subprocess.CompletedProcess, Path, list[str]]:
    repo = sandbox / "repo"
    shutil.copytree(work / "slurm", repo / "tools" / "gpu_node_check" / "work" / "slurm")
    shutil.copy(work / "commands.json", repo / "tools" / "gpu_node_check" / "work" / "commands.json")
    containers_work(repo / "tools" / "gpu_node_check" / "work" / "containers")
    (repo / "ops").mkdir()
    shutil.copy(ROOT / "ops" / "verify_gpu.py", repo / "ops" / "verify_gpu.py")
    scratch = sandbox / "tmp" / "scratch"
    wrap = scratch / "slurm-install" / "wrap"
    wrap.mkdir(parents=True)
    for name in ("munged", "munge", "unmunge", "slurmctld", "slurmd", "slurmstepd"):
        (wrap / name).write_text(FAKE)
    for name in ("srun", "sinfo", "scontrol", "squeue"):
        (wrap / name).write_text(FAKE)
    (sandbox / "bin" / "lxc-attach").write_text(f'#!/bin/sh\nprintf "%s\\0" "lxc-attach $*" >> {sandbox}/jobs\n')
    for node in ("dev-c000", "dev-c001"):
        (scratch / "ct" / node / "munge").mkdir(parents=True)
        (scratch / "ct" / node / "root").mkdir(parents=True)
    (scratch / "slurm-install" / "usr" / "lib" / "x86_64-linux-gnu" / "slurm-wlm").mkdir(parents=True)
    (sandbox / "shared").mkdir()
    for path in (sandbox, *sandbox.rglob("*")):
        path.chmod(0o777 if path.is_dir() else 0o755)
    drop = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"] if os.geteuid() == 0 else []
    env = {
        "PATH": f"{sandbox}/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "SCRATCH": str(scratch),
        "SHARED": f"{sandbox}/shared",
        "CALLS": f"{sandbox}/jobs",
        "LEAK": leak,
    }
    script = [*drop, "bash", "tools/gpu_node_check/slurm_check.sh"]
    done = subprocess.run(script, cwd=repo, env=env, capture_output=True, text=True, timeout=120)
    calls = (sandbox / "jobs").read_text().split("\0")[:-1] if (sandbox / "jobs").exists() else []
    return done, scratch, calls


def test_slurm_check_runs_the_daemons_from_the_unpacked_tree_on_the_stacks_files(sandbox, slurm_files):
    done, scratch, calls = slurm_check(sandbox, slurm_files)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "slurm check passed" in done.stdout
    etc, munge, install = scratch / "slurm-etc", scratch / "munge", scratch / "slurm-install"
    # On the host: munged with its files in the scratch directory, slurmctld on the changed copy.
    assert f"munged --force --socket={munge}/munge.socket --key-file={munge}/munge.key" in " ".join(calls)
    assert f"slurmctld -f {etc}/slurm.conf" in calls
    conf = (etc / "slurm.conf").read_text().splitlines()
    for line in (
        f"AuthInfo=socket={munge}/munge.socket",
        "SlurmUser=root",
        f"StateSaveLocation={scratch}/cluster/slurmctld",
        f"SlurmctldLogFile={scratch}/cluster/slurmctld.log",
        f"PluginDir={install}/usr/lib/x86_64-linux-gnu/slurm-wlm",
        "ProctrackType=proctrack/cgroup",
        "TaskPlugin=task/cgroup,task/affinity",
    ):
        assert line in conf, line
    assert any(line.startswith("NodeName=c001 NodeAddr=127.0.0.3 Port=6819 CPUs=4") for line in conf), conf
    cgroup = (etc / "cgroup.conf").read_text().splitlines()
    assert {"ConstrainDevices=yes", "IgnoreSystemd=yes", "CgroupAutomount=yes"} <= set(cgroup)
    assert (etc / "gres.conf").read_text() == (slurm_files / "slurm" / "gres.conf").read_text()
    # In each node: munged and slurmd (configless, its own name) through lxc-attach.
    for node in ("c000", "c001"):
        attached = [c for c in calls if c.startswith(f"lxc-attach -n dev-{node} ")]
        assert any(f"{install}/wrap/munged --force --socket={munge}/munge.socket" in c for c in attached), attached
        slurmd = f"{install}/wrap/slurmd -N {node} --conf-server 127.0.0.1:6817 -d {install}/wrap/slurmstepd"
        assert any(c.endswith(slurmd) for c in attached), attached
    # The jobs.
    jobs = [c for c in calls if c.startswith("srun ")]
    assert "srun --quiet -w c000 --gres=gpu:1 nvidia-smi -L" in jobs
    assert "srun --quiet -w c000 nvidia-smi -L" in jobs
    cuda = "srun --quiet -w c000 --gres=gpu:1 --mem=3G python3 -c "
    assert any(c.startswith(cuda) and "cuMemAlloc" in c for c in jobs)
    assert sum(c.startswith("srun --quiet -w c00") and "/proc/self/cgroup" in c for c in jobs) == 2
    assert "ok --gres=gpu:1: nvidia-smi -L lists 1 GPU" in done.stdout
    assert "ok c000: the job runs in its own cgroup v2" in done.stdout
    # Jobs in container images: Pyxis where slurm.conf's PluginDir is (this host's srun, the
    # nodes' slurmd), the stack's plugstack.conf; Enroot with the stack's files in each node.
    plugins = install / "usr" / "lib" / "x86_64-linux-gnu" / "slurm-wlm"
    assert (plugins / "spank_pyxis.so").read_text() == "pyxis\n"
    assert (etc / "plugstack.conf").read_text() == (slurm_files / "slurm" / "plugstack.conf").read_text()
    node_files = json.loads((slurm_files / "commands.json").read_text())["dev-c000-slurm-containers"]["environment"]
    for node in ("dev-c000", "dev-c001"):
        root = scratch / "ct" / node / "root"
        assert (root / "usr/local/bin/enroot").exists()
        assert (root / "etc/enroot/enroot.conf").read_text().strip() == node_files["ENROOT_CONF"].strip()
        prolog = root / "usr/local/sbin/gpucluster-prolog"
        assert prolog.read_text().strip() == node_files["PROLOG"].strip() and prolog.stat().st_mode & 0o777 == 0o755
        assert (root / "etc/enroot/hooks.d/50-gpucluster-driver.sh").stat().st_mode & 0o777 == 0o755
    image = f"--container-image={sandbox}/shared/probe.sqsh"
    assert f"srun --quiet -w c000 {image} cat /etc/os-release" in jobs
    assert f"srun --quiet -w c000 --gres=gpu:1 {image} nvidia-smi -L" in jobs
    assert f"srun --quiet -w c000 {image} nvidia-smi -L" in jobs
    assert any(c.startswith(f"srun --quiet -w c000 --gres=gpu:1 --mem=3G {image} python3 -c ") for c in jobs)
    for said in (
        "ok the job ran in the image (its os-release)",
        "ok in the image, --gres=gpu:1: nvidia-smi -L lists 1 GPU",
        "ok in the image, no --gres: nvidia-smi -L lists no GPU",
        "ok in the image: the acceptance probe and its CUDA computation",
    ):
        assert said in done.stdout, done.stdout
    assert not (sandbox / "shared" / "probe.sqsh").exists()


def test_slurm_check_fails_when_a_job_without_gres_sees_the_gpu(sandbox, slurm_files):
    done, _, _ = slurm_check(sandbox, slurm_files, leak="leak")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "FAIL no --gres: nvidia-smi -L lists 1 GPUs" in done.stdout
    assert "slurm check FAILED" in done.stdout


def test_the_nodes_get_the_unpacked_slurm_and_their_own_munge_directory():
    text = (ROOT / "tools" / "gpu_node_check" / "in_namespace.sh").read_text()
    assert 'echo "lxc.mount.entry = $SLURM_ROOT ${SLURM_ROOT#/} none bind,ro,create=dir 0 0"' in text
    assert 'echo "lxc.mount.entry = $CT/$name/munge ${SCRATCH#/}/munge none bind,create=dir 0 0"' in text
    # Slurm runs while both nodes do: before c001 stops.
    assert text.index("bash tools/gpu_node_check/slurm_check.sh") < text.index("lxc-stop -n dev-c001 -k")


@pytest.mark.privileged
def test_the_carried_packages_hold_slurms_closure(tmp_path):
    """Debian's Slurm and munge unpacked as check.sh does (common.sh's slurm_unpack): every
    library their programs and plugins need is carried or in a package left out on purpose
    (prepare.py's LEFT_OUT: what every Ubuntu 24.04 has), and the programs run from there."""
    spec = importlib.util.spec_from_file_location("prepare", ROOT / "tools" / "gpu_node_check" / "prepare.py")
    prepare = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(prepare)
    try:
        prepare.download(tmp_path)
    except (subprocess.CalledProcessError, SystemExit) as error:
        pytest.skip(f"Debian's packages cannot be downloaded here: {error}")
    # A client reads a slurm.conf before anything else: a small one.
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=check\nSlurmctldHost=localhost\nNodeName=c000 CPUs=1\nPartitionName=p Nodes=c000\n")
    script = (
        'source tools/gpu_node_check/common.sh; scratch_paths; slurm_unpack "$1" || exit 1; '
        'for p in slurmctld slurmd srun sinfo scontrol squeue; do "$SLURM_ROOT/wrap/$p" -V || exit 1; done; '
        '"$SLURM_ROOT/wrap/munged" --version || exit 1; "$SLURM_ROOT/wrap/slurmd" -C'
    )
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "SCRATCH": str(tmp_path), "SLURM_CONF": str(conf)}
    done = subprocess.run(
        ["bash", "-c", script, "bash", str(tmp_path / "slurm-debs")], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("slurm-wlm 22.05") == 6 and "NodeName=" in done.stdout, done.stdout
    install = tmp_path / "slurm-install"
    carried = {p.name for p in install.rglob("*.so*")}
    missing = {}
    for elf in [p for p in install.rglob("*") if p.is_file() and p.read_bytes()[:4] == b"\x7fELF"]:
        dynamic = subprocess.run(["readelf", "-d", str(elf)], capture_output=True, text=True).stdout
        for needed in re.findall(r"\(NEEDED\).*\[(.+)\]", dynamic):
            if needed in carried:
                continue
            owner = subprocess.run(["dpkg", "-S", f"*/{needed}"], capture_output=True, text=True).stdout
            packages = {line.split(":")[0] for line in owner.splitlines()}
            if not packages & prepare.LEFT_OUT:
                missing.setdefault(needed, []).append(elf.name)
    assert not missing, f"libraries neither carried nor in a left-out package: {missing}"


def test_the_probes_image_runs_the_probes_python_without_the_machines_files(tmp_path):
    """probe_image.py's tree: its own python3 imports what the acceptance probe imports, and
    says the image's system, chrooted into it (no file of this machine's but the kernel; as
    root, as CI runs)."""
    spec = importlib.util.spec_from_file_location("probe_image", ROOT / "tools" / "gpu_node_check" / "probe_image.py")
    probe_image = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(probe_image)
    root = tmp_path / "image"
    probe_image.rootfs(root)
    imports = "import ctypes, errno, json, os, shutil, subprocess, sys, tempfile; print(open('/etc/os-release').read())"
    done = subprocess.run(
        ["chroot", str(root), "/usr/bin/python3", "-c", imports], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert 'PRETTY_NAME="gpucluster GPU check image (python3)"' in done.stdout
    assert (root / "etc" / "ld.so.conf").read_text().startswith("/usr/lib/x86_64-linux-gnu\n")
    assert sum(path.stat().st_size for path in root.rglob("*") if path.is_file()) < 64 * 2**20
