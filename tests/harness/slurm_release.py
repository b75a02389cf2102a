"""The Slurm of a node image release, run here to judge the files rendered for it.

bookworm's is this host's own (Debian 12: slurmctld, slurmd and munge 22.05 from .ci/run); any
other release's is a Debian root of that release with slurmctld, slurmd, slurm-client and munge,
made once with debootstrap and apt-get from Debian's archive and kept in
~/.cache/gpucluster/slurm-roots/<release> (about 400 MB; remove it to make it again).

`judge` runs, in private namespaces (pid, mount, network, hostname: nothing reaches the host's
network or outlives the call), a munged of that root on a private socket, `slurmd -G` (reads
slurm.conf, cgroup.conf and gres.conf and loads the GRES plugins, with stand-in GPU device
nodes) and slurmctld until it runs as primary controller; it returns their complaints.
"""

import fcntl
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from components.lxc.config import RELEASES

ROOTS = Path.home() / ".cache" / "gpucluster" / "slurm-roots"
ROOT_PACKAGES = ("slurmctld", "slurmd", "slurm-client", "munge")
MIRROR = "http://deb.debian.org/debian"
# Errors every fresh controller logs (no state yet), a Debian 13 plugstack.conf whose include
# glob Slurm does not expand, and the burst programs, which live on the controller's host only.
BENIGN = re.compile(
    r"Could not open \w+ state file|NOTE: Trying backup state save file|mpi/pmix|MPI: Cannot create context"
    r"|High latency for \d+ calls to gettimeofday|does not support glob parsing|\"Include\" failed in file"
    r"|power_save program /opt/gpucluster-burst/.* not executable|power_save module disabled"
)
READY = "Running as primary controller"


def host_release() -> str:
    return Path("/etc/os-release").read_text().split("VERSION_CODENAME=", 1)[1].split()[0]


def slurm_root(release: str) -> Path:
    """The root whose Slurm is the release's: / for this host's own release, else a made one."""
    assert os.geteuid() == 0, "running another release's Slurm needs root (debootstrap, chroot, namespaces)"
    if release == host_release():
        missing = [tool for tool in ("slurmctld", "slurmd", "munged", "scontrol") if not shutil.which(tool)]
        assert not missing, f"missing {missing}: run `bash .ci/run` (installs slurmctld, slurmd, munge)"
        return Path("/")
    root = ROOTS / release
    ROOTS.mkdir(parents=True, exist_ok=True)
    with open(ROOTS / f"{release}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (root / ".ready").exists():
            _make_root(release, root)
    return root


def _make_root(release: str, root: Path) -> None:
    assert shutil.which("debootstrap"), "debootstrap is missing: apt-get install debootstrap"
    shutil.rmtree(root, ignore_errors=True)
    log = ROOTS / f"{release}.log"
    with open(log, "w") as out:

        def step(*argv: str) -> None:
            done = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, check=False)
            assert done.returncode == 0, f"making the {release} Slurm root failed at {argv[:3]}: see {log}"

        step("debootstrap", "--variant=minbase", release, str(root), MIRROR)
        # No daemon starts inside the root while its packages install.
        (root / "usr/sbin/policy-rc.d").write_text("#!/bin/sh\nexit 101\n")
        (root / "usr/sbin/policy-rc.d").chmod(0o755)
        step("chroot", str(root), "apt-get", "install", "-y", "-q", "--no-install-recommends", *ROOT_PACKAGES)
        step("chroot", str(root), "apt-get", "clean")
    (root / ".ready").touch()


def slurm_version(release: str) -> str:
    """`slurmd -V` of the release's root, e.g. 'slurm-wlm 24.11.5'."""
    root = slurm_root(release)
    argv = ["slurmd", "-V"] if root == Path("/") else ["chroot", str(root), "slurmd", "-V"]
    return subprocess.run(argv, capture_output=True, text=True, check=True).stdout.strip()


@dataclass(frozen=True)
class Verdict:
    slurmd: list[str]  # slurmd -G's complaints (errors, fatal)
    slurmctld: list[str]  # slurmctld's complaints, or its last lines when it did not come up
    ready: bool

    @property
    def complaints(self) -> list[str]:
        return self.slurmd + self.slurmctld + ([] if self.ready else ["slurmctld did not run as primary controller"])


# Runs as the pid namespace's first process: everything it starts ends with it.
_OUTER = r"""
set -e
root=$1 check=$2 address=$3 node=$4 gpus=$5
mount -t tmpfs -o mode=755 dev "$root/dev"
for d in null:1:3 zero:1:5 random:1:8 urandom:1:9; do
  IFS=: read -r name major minor <<< "$d"; mknod -m 666 "$root/dev/$name" c "$major" "$minor"
done
for i in $(seq 0 $((gpus - 1))); do mknod -m 666 "$root/dev/nvidia$i" c 195 "$i"; done
mknod -m 666 "$root/dev/nvidiactl" c 195 255
if [ "$root" != / ]; then
  mount -t proc proc "$root/proc"
  mount --rbind /sys "$root/sys"
  mkdir -p "$root/check" && mount --bind "$check" "$root/check"
  inside=/check
else
  mount -t proc proc /proc
  inside=$check
fi
hostname "$node"
ip link set lo up
ip link add v0 type veth peer name v1
ip addr add "$address/32" dev v0
ip link set v0 up && ip link set v1 up
exec chroot "$root" /bin/bash -c "$INNER" inner "$inside"
"""

_INNER = r"""
set -u
c=$1
chown slurm "$c" "$c/state"
munged --force --socket="$c/munge.socket" --key-file="$c/munge.key" --pid-file="$c/munged.pid" \
  --seed-file="$c/munged.seed" --log-file="$c/munged.log"
slurmd -G -N "$(hostname)" -f "$c/slurm.conf" > "$c/slurmd.out" 2>&1
slurmctld -D -f "$c/slurm.conf" > "$c/slurmctld.out" 2>&1 &
for _ in $(seq 200); do grep -q "Running as primary controller" "$c/slurmctld.log" 2>/dev/null && break; sleep 0.1; done
kill %1 2>/dev/null; wait
"""


def judge(release: str, slurm_conf: str, cgroup_conf: str, gres_conf: str, node: str, address: str) -> Verdict:
    """What the release's slurmd and slurmctld say of the files, on a node named `node` that
    holds the controller's `address`."""
    root = slurm_root(release)
    with tempfile.TemporaryDirectory(prefix="gpucluster-slurm-judge-") as work:
        check = Path(work)
        check.chmod(0o755)
        (check / "state").mkdir()
        inside = "/check" if root != Path("/") else work
        private = {
            "StateSaveLocation": f"{inside}/state",
            "SlurmctldPidFile": f"{inside}/slurmctld.pid",
            "SlurmctldLogFile": f"{inside}/slurmctld.log",
            "AuthInfo": f"socket={inside}/munge.socket",
            "AccountingStoragePass": f"{inside}/munge.socket",
        }
        lines = []
        for line in slurm_conf.splitlines():
            key = line.split("=", 1)[0]
            lines.append(f"{key}={private[key]}" if key in private else line)
        (check / "slurm.conf").write_text("\n".join(lines) + "\n")
        (check / "cgroup.conf").write_text(cgroup_conf)
        (check / "gres.conf").write_text(gres_conf)
        (check / "munge.key").write_bytes(os.urandom(1024))
        (check / "munge.key").chmod(0o400)
        gpus = 1 + max((int(n) for n in re.findall(r"/dev/nvidia(\d+)", gres_conf)), default=0)
        namespaces = ["unshare", "--pid", "--fork", "--mount", "--net", "--uts"]
        done = subprocess.run(
            [*namespaces, "bash", "-c", _OUTER, "outer", str(root), work, address, node, str(gpus)],
            env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "INNER": _INNER},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, f"the judge's namespace failed: {done.stderr}"

        def read(name: str) -> list[str]:
            path = check / name
            return path.read_text(errors="replace").splitlines() if path.exists() else []

        def complaints(found: list[str]) -> list[str]:
            return [line for line in found if re.search(r"error:|fatal:", line) and not BENIGN.search(line)]

        ctld = read("slurmctld.log") + read("slurmctld.out")
        ready = any(READY in line for line in ctld)
        return Verdict(
            slurmd=complaints(read("slurmd.out")),
            slurmctld=complaints(ctld) or ([] if ready else ctld[-10:]),
            ready=ready,
        )


def releases() -> list[str]:
    return list(RELEASES)
