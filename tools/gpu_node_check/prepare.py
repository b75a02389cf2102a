"""The node config on a real GPU host without the cluster (docs/gpu.md, "On an NVIDIA H200"):
step one, here, on a machine with the project's venv and Debian's package mirror.

    venv/bin/python tools/gpu_node_check/prepare.py

Writes tools/gpu_node_check/work/: commands.json (the preflight and the two node containers'
create commands, scripts and environments, and c000's setup for jobs in container images, of
a stack modelled on a one-GPU host: c000 owns /dev/nvidia0, c001 has no GPU, 4 CPUs each),
debs/ (Debian 12's LXC 5.0.2, for a GPU host that has no LXC and no package mirror),
slurm-debs/ (Debian 12's Slurm 22.05 and munge, with the libraries an Ubuntu 24.04 host may
lack: CARRIED), slurm/ (the stack's slurm.conf, gres.conf, cgroup.conf and plugstack.conf,
the controller on the host, and env.json: the slurmd create environments and the cluster
directory) and containers/ (Enroot and Pyxis from this machine's build cache of the node
image, squashfs-tools' debs, and probe.sqsh: the image the probe runs in, probe_image.py).
About 20 MiB in all. Then, as root on the GPU host, with this repository
copied there: `bash tools/gpu_node_check/check.sh` (it needs bash, python3 and the NVIDIA
driver; nothing of the venv).
"""

import copy
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WORK = Path(__file__).with_name("work")
sys.path.insert(0, str(ROOT))

from components.composition.cluster import controller_hostname  # noqa: E402 (after the path)
from components.composition.config import ClusterConfig  # noqa: E402 (after the path)
from components.slurm.slurm_conf import render_cgroup_conf, render_gres_conf  # noqa: E402
from tests.harness.command_executor import host_commands  # noqa: E402
from tests.harness.program_harness import run_program, slurm_conf_of, stack_config  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
import probe_image  # noqa: E402 (beside this file)

LXC_PACKAGES = ("lxc", "liblxc1", "liblxc-common", "lxc-templates", "libapparmor1")
# Where the node image's build keeps Enroot and Pyxis (components/files/lib/containers_build.sh).
BUILD_CACHE = Path("/var/cache/gpucluster/node-packages/containers")
# unsquashfs (Enroot's create of a squashfs image) and mksquashfs (the probe's image, here).
SQUASHFS_PACKAGES = ("squashfs-tools", "liblzo2-2")
WANTED = ("dev-host-preflight", "dev-c000-lxc", "dev-c001-lxc", "dev-c000-slurm-containers")
SLURMD = ("dev-c000-slurm-slurmd", "dev-c001-slurm-slurmd")

# Debian 12's Slurm and munge, unpacked with dpkg -x (no maintainer scripts) on the GPU host:
# the daemons, the clients, their plugins, and the libraries of their closure
# (apt-cache depends --recurse) that an Ubuntu 24.04 base install may lack.
CARRIED = (
    "slurmctld",  # slurmctld-wlm
    "slurmd",  # slurmd-wlm, slurmstepd-wlm
    "slurm-client",  # srun, sinfo, scontrol, squeue
    "slurm-wlm-basic-plugins",  # libslurmfull.so and every plugin (cgroup/v2, task/cgroup, gres/gpu)
    "munge",  # munged, munge, unmunge
    "libmunge2",  # auth/munge, munge
    "libhwloc15",  # slurmd's topology (slurmd -C), task/affinity
    "libnuma1",  # slurmd, task/affinity
    "libdbus-1-3",  # cgroup/v2 (linked, though IgnoreSystemd makes no call)
    "libjson-c5",  # plugins (serializer, gres)
    "liblua5.1-0",  # job_submit/lua, cli_filter/lua (linked by the plugin set)
    "libyaml-0-2",  # plugins (serializer/yaml)
    "libreadline8",  # scontrol (Ubuntu 24.04 names its libreadline8t64)
)
# The rest of that closure: what every Ubuntu 24.04 has (glibc, the C++ runtime, compression,
# crypto, PAM, systemd's and SELinux's libraries), and the tools only maintainer scripts use,
# which dpkg -x never runs. A dependency in neither list stops prepare.py, naming it.
LEFT_OUT = frozenset(
    (
        "libc6",
        "libgcc-s1",
        "gcc-12-base",
        "libstdc++6",
        "zlib1g",
        "libbz2-1.0",
        "liblz4-1",
        "liblzma5",
        "libzstd1",
        "libgcrypt20",
        "libgpg-error0",
        "libpam0g",
        "libpam-modules",
        "libtinfo6",
        "readline-common",
        "libsystemd0",
        "libudev1",
        "libelogind0",
        "libcap2",
        "libcap-ng0",
        "libaudit1",
        "libaudit-common",
        "libselinux1",
        "libpcre2-8-0",
        "libcrypt1",
        "libsemanage2",
        "libsemanage-common",
        "libsepol2",
        "adduser",
        "passwd",
        "debconf",
        "cdebconf",
        "dpkg",
        "tar",
        "install-info",
        "lsb-base",
        "sysvinit-utils",
        "sensible-utils",
        "ucf",
        "libdebian-installer4",
        "libnewt0.52",
        "libslang2",
        "libtextwrap1",
        "libacl1",
        "libdb5.3",
        "libmd0",
        "libpam-modules-bin",
    )
)


def stack() -> dict:
    config = copy.deepcopy(stack_config("local"))
    cluster = config["cluster"]
    cluster["name"] = "dev"
    cluster["host"]["shared_dir"] = "/srv/gpucluster/dev/shared"
    cluster["network"] = {
        "nat_bridge": {"name": "devbr0", "address": "10.61.3.1/24"},
        "cluster_bridge": {"name": "devbr1", "subnet": "10.61.5.0/24"},
    }
    cluster["gpu"] = {"devices": ["/dev/nvidia0"], "share_between_nodes": False}
    cluster["nodes"] = [
        {"name": "c000", "nat_address": "10.61.3.2", "cluster_address": "10.61.5.1", "cpus": 4, "gpus": 1},
        {"name": "c001", "nat_address": "10.61.3.3", "cluster_address": "10.61.5.2", "cpus": 4, "gpus": 0},
    ]
    cluster["slurm"] = {"controller": {"placement": "host"}, "partitions": [{"name": "gpu", "default": True}]}
    cluster.pop("web_app", None)
    return config


def write_commands(work: Path) -> list[str]:
    """commands.json and slurm/: the node commands, the rendered Slurm files and the slurmd
    create environments of the `dev` stack. The names of the commands written."""
    config = stack()
    commands = {c.name: c for c in host_commands(run_program(config, stack="dev"))}
    work.mkdir(exist_ok=True)
    dump = {
        name: {"create": c.create, "environment": c.environment, "interpreter": list(c.interpreter)}
        for name, c in commands.items()
        if name in WANTED
    }
    (work / "commands.json").write_text(json.dumps(dump, indent=1))
    # The files the controller writes beside slurm.conf, rendered from the parsed stack as the
    # program does (placement 'host': its own container's name; slurm_check.sh names this host).
    cluster = ClusterConfig.model_validate(config["cluster"])
    files = {
        # Its nodes set no memory_mb: their share of the host the mocked run measured.
        "slurm.conf": slurm_conf_of(cluster, controller_hostname(cluster)),
        "gres.conf": render_gres_conf(cluster),
        "cgroup.conf": render_cgroup_conf(),
    }
    served = commands["dev-slurm-slurmctld"].environment
    keys = {"slurm.conf": "SLURM_CONF_TEXT", "gres.conf": "GRES_CONF_TEXT", "cgroup.conf": "CGROUP_CONF_TEXT"}
    for name, key in keys.items():
        if files[name] != served[key]:
            raise SystemExit(f"{name}: the rendered file is not the one the program gives slurmctld")
    # Pyxis in slurmd, slurmstepd and srun, as the controller serves it (jobs in container images).
    files["plugstack.conf"] = served["PLUGSTACK_CONF_TEXT"]
    slurm = work / "slurm"
    slurm.mkdir(exist_ok=True)
    for name, text in files.items():
        (slurm / name).write_text(text)
    env = {
        "cluster_dir": cluster.cluster_dir,
        "slurmd": {commands[n].environment["NODE"]: commands[n].environment for n in SLURMD},
    }
    (slurm / "env.json").write_text(json.dumps(env, indent=1))
    return sorted(dump)


def closure(packages: tuple[str, ...]) -> set[str]:
    """The packages `packages` need, themselves included (Depends and Pre-Depends, recursively)."""
    done = subprocess.run(
        ["apt-cache", "depends", "--recurse", "--no-recommends", "--no-suggests", "--no-conflicts",
         "--no-breaks", "--no-replaces", "--no-enhances", *packages],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    return {line for line in done.stdout.splitlines() if line and not line.startswith((" ", "<"))}


def download(work: Path) -> None:
    """debs/ (LXC) and slurm-debs/ (Slurm, munge and the libraries in CARRIED)."""
    unlisted = closure(CARRIED) - set(CARRIED) - LEFT_OUT
    if unlisted:
        raise SystemExit(f"Slurm's closure needs packages neither carried nor left out: {sorted(unlisted)}")
    for folder, packages in (("debs", LXC_PACKAGES), ("slurm-debs", CARRIED)):
        debs = work / folder
        debs.mkdir(exist_ok=True)
        for old in debs.glob("*.deb"):
            old.unlink()
        subprocess.run(["apt-get", "download", *packages], cwd=debs, check=True, capture_output=True)


def containers(work: Path) -> str:
    """containers/: Enroot and Pyxis as the node image's build made them for Debian 12's Slurm
    (the build cache of this machine: enroot.tar), squashfs-tools (debs/: unsquashfs, for a GPU
    host without it; mksquashfs, here) and the probe's image (probe.sqsh). The cache entry used."""
    folder = work / "containers"
    folder.mkdir(exist_ok=True)
    slurmd = next((work / "slurm-debs").glob("slurmd_*.deb")).name.split("_")[1]
    built = sorted(BUILD_CACHE.glob(f"bookworm-amd64-slurm-{slurmd}-src-*/complete"), key=lambda p: p.stat().st_mtime)
    if not built:
        raise SystemExit(
            f"no build of Enroot and Pyxis for Debian 12's Slurm {slurmd} in {BUILD_CACHE}: bring up a "
            "bookworm cluster with containers here first (./up.sh on the e2e stack, or "
            "`venv/bin/python -m pytest tests/test_e2e.py`), which builds them into its node image and the cache"
        )
    entry = built[-1].parent
    subprocess.run(["tar", "-C", str(entry / "root"), "-cf", str(folder / "enroot.tar"), "."], check=True)
    debs = folder / "debs"
    debs.mkdir(exist_ok=True)
    for old in debs.glob("*.deb"):
        old.unlink()
    subprocess.run(["apt-get", "download", *SQUASHFS_PACKAGES], cwd=debs, check=True, capture_output=True)
    with tempfile.TemporaryDirectory() as tmp:
        unpacked, image = Path(tmp) / "tools", Path(tmp) / "image"
        for deb in debs.glob("*.deb"):
            subprocess.run(["dpkg", "-x", str(deb), str(unpacked)], check=True)
        library = unpacked / "lib" / "x86_64-linux-gnu"  # liblzo2
        mksquashfs = ["env", f"LD_LIBRARY_PATH={library}", str(unpacked / "usr" / "bin" / "mksquashfs")]
        probe_image.rootfs(image)
        probe_image.squash(image, folder / "probe.sqsh", mksquashfs)
    return entry.name


def size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def main() -> int:
    names = write_commands(WORK)
    download(WORK)
    print(f"Enroot and Pyxis: {containers(WORK)}")
    counts = {f: len(list((WORK / f).glob("*.deb"))) for f in ("debs", "slurm-debs")}
    print(f"{WORK}: {names}, slurm/ {sorted(p.name for p in (WORK / 'slurm').iterdir())}, packages {counts}")
    # The device tool carries at most 64 MiB.
    print(f"{WORK}: {size(WORK) / 2**20:.1f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
