"""What the nodes run jobs in container images with: Enroot's site config, the mounts every
container gets, the driver hook and the prolog (files/), the site's registry accounts, and the
plugstack.conf line that loads Pyxis in slurmd, slurmstepd and srun."""

from pathlib import Path

import pulumi

from components.containers.config import ContainersConfig

FILES = Path(__file__).parent / "files"
# Where the node image's build puts them (components/lxc/files/containers_build.sh): Pyxis in
# Slurm's plugin directory, where plugstack.conf's relative names are looked up.
PYXIS_PLUGIN = "spank_pyxis.so"
# slurm.conf's Prolog: each person's Enroot directories, made by root (files/prolog.sh).
PROLOG_PROGRAM = "/usr/local/sbin/gpucluster-prolog"
# The site's registry accounts, read by Enroot as the person (ENROOT_CONFIG_PATH).
SITE_CONFIG_DIR = "/etc/enroot/site"
# Each person's Enroot runtime directory is made under it (user-<uid>), on the node's tmpfs.
RUNTIME_DIR = "/run/enroot"


def plugstack_conf() -> str:
    """plugstack.conf: Pyxis in every slurmd and slurmstepd (served by the controller with
    slurm.conf) and in every srun and sbatch (the login node's copy). Its containers live for
    the job (a second step of the job finds the first's, by name), and sbatch takes the options
    too (the batch script runs in the container)."""
    return (
        "# gpu-cluster: jobs in container images (srun --container-image), components/containers\n"
        f"required {PYXIS_PLUGIN} runtime_path=/run/pyxis container_scope=job sbatch_support=1\n"
    )


def enroot_conf(containers: ContainersConfig) -> str:
    """/etc/enroot/enroot.conf: each person's images and containers on the node's disk in the
    directories the prolog made for them; the site's accounts; /dev as the node's (the job's
    devices cgroup decides which GPU opens)."""
    data = containers.data_dir
    settings = {
        "ENROOT_RUNTIME_PATH": f"{RUNTIME_DIR}/user-$(id -u)",
        "ENROOT_CACHE_PATH": f"{data}/cache/user-$(id -u)",
        "ENROOT_DATA_PATH": f"{data}/data/user-$(id -u)",
        "ENROOT_TEMP_PATH": "${TMPDIR:-/tmp}",
        "ENROOT_CONFIG_PATH": SITE_CONFIG_DIR,
        "ENROOT_MOUNT_HOME": "no",
        "ENROOT_RESTRICT_DEV": "no",
        "ENROOT_ROOTFS_WRITABLE": "yes",
        "ENROOT_MAX_PROCESSORS": "$(nproc)",
    }
    return "# gpu-cluster (components/containers): the site's Enroot settings\n" + "".join(
        f"{key} {value}\n" for key, value in settings.items()
    )


def mounts_fstab(shared_dir: str) -> str:
    """What every container gets from its node: shared_dir at its path, where people submit
    from and their jobs write (`--container-workdir` starts the job there)."""
    return f"{shared_dir} {shared_dir} none x-create=dir,rbind,rw,nosuid,nodev\n"


def prolog(containers: ContainersConfig) -> str:
    """The prolog with the directory and the limit it acts on."""
    script = (FILES / "prolog.sh").read_text()
    shebang, rest = script.split("\n", 1)
    settings = (
        f"DATA_DIR={containers.data_dir}\nRUNTIME_DIR={RUNTIME_DIR}\nCACHE_LIMIT_MB={containers.cache_limit_mb}\n"
    )
    return f"{shebang}\n{settings}{rest}"


def credentials(containers: ContainersConfig) -> pulumi.Output[str] | None:
    """The site's accounts as Enroot reads them (curl's netrc: `machine HOST login USER password
    PASS`), secret throughout; None without any. A person names the account in the image
    (`USER@REGISTRY#IMAGE`), as Enroot asks."""
    lines = []
    config = pulumi.Config()
    for registry in containers.registries:
        if registry.username is None or registry.password_secret is None:
            continue
        host = registry.host.rsplit(":", 1)[0]
        password = config.require_secret(registry.password_secret)
        lines.append(password.apply(lambda p, h=host, u=registry.username: f"machine {h} login {u} password {p}"))
    if not lines:
        return None
    return pulumi.Output.secret(pulumi.Output.all(*lines).apply(lambda parts: "\n".join(parts)))


def node_environment(containers: ContainersConfig) -> dict[str, str]:
    """The per-node setup's parameters (files/containers_create.sh)."""
    environment = {
        "ENROOT_CONF": enroot_conf(containers),
        "PROLOG": prolog(containers),
        "DRIVER_HOOK": (FILES / "driver_hook.sh").read_text(),
        "DATA_DIR": containers.data_dir,
        "RUNTIME_DIR": RUNTIME_DIR,
    }
    for index, registry in enumerate(containers.registries):
        if registry.ca_cert:
            environment[f"REGISTRY_CA_{index}"] = registry.ca_cert
    return environment
