"""Where the burst programs live on the controller (the host or container slurmctld runs in):
one directory per cluster, so clusters sharing a host keep apart."""

from dataclasses import dataclass

PROGRAMS = ("resume", "suspend", "resume_fail", "reconcile")


@dataclass(frozen=True)
class BurstLayout:
    cluster: str

    @property
    def base(self) -> str:
        return f"/opt/gpucluster-burst/{self.cluster}"

    @property
    def venv(self) -> str:
        """boto3, pinned (Debian's is too old for per-launch user data), in a venv of its own."""
        return f"{self.base}/venv"

    def program(self, name: str) -> str:
        """The executable slurmctld runs (a wrapper calling the venv's Python)."""
        return f"{self.base}/bin/{name.replace('_', '-')}"

    @property
    def config_file(self) -> str:
        return f"{self.base}/burst.json"

    @property
    def credentials_file(self) -> str:
        """The controller's AWS key (0400 slurm): written from stdin, read by the programs."""
        return f"/etc/gpucluster-burst/{self.cluster}.credentials"

    @property
    def state_dir(self) -> str:
        """Types skipped after a capacity error, launches in flight (slurm's)."""
        return f"/var/lib/gpucluster-burst/{self.cluster}"

    @property
    def log_file(self) -> str:
        return f"/var/log/gpucluster-burst/{self.cluster}.log"
