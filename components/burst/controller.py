"""BurstPrograms: the resume, suspend and reconcile programs on the controller, with their
config, boto3 in a venv of their own (from its hashed lock), the controller's AWS key and the
reconciler's timer."""

import json
from pathlib import Path

import pulumi

from components.burst.cloud import BurstCloud
from components.burst.config import BurstConfig
from components.burst.layout import BurstLayout
from components.burst.programs import program_config
from components.common.options import child_options
from components.common.transport import Transport, host_command

FILES = Path(__file__).parent / "files"
PROGRAM_FILES = {
    "BURST_COMMON_PY": "burst_common.py",
    "RESUME_PY": "resume.py",
    "SUSPEND_PY": "suspend.py",
    "RECONCILE_PY": "reconcile.py",
    "STORE_MUNGE_KEY_PY": "store_munge_key.py",
    "REQUIREMENTS_LOCK": "requirements.lock",
}


class BurstPrograms(pulumi.ComponentResource):
    """One command where slurmctld runs (`container`, or the host): it installs the programs
    slurm.conf names and puts the munge key (`munge_key_file`, on the host) in the burst
    secret. The controller's AWS key arrives by stdin, a secret: never in argv, a log or the
    state in plain text."""

    def __init__(
        self,
        name: str,
        cluster: str,
        config: BurstConfig,
        cloud: BurstCloud,
        user_data: str,
        munge_key_file: str,
        container: str | None,
        slurm_conf: str | None,
        transport: Transport,
        opts: pulumi.ResourceOptions | None = None,
    ):
        super().__init__("gpu-cluster:burst:BurstPrograms", name, None, opts)
        layout = BurstLayout(cluster)
        settings = pulumi.Output.all(*[s.id for s in cloud.subnets]).apply(
            lambda ids: json.dumps(program_config(cluster, config, list(ids), user_data, slurm_conf), sort_keys=True)
        )
        self.install = host_command(
            f"{name}-install",
            transport=transport,
            create=FILES / "programs_create.sh",
            delete=FILES / "programs_delete.sh",
            environment={
                "CLUSTER": cluster,
                "CONTAINER": container or "",
                "BASE": layout.base,
                "CONFIG_JSON": settings,
                "CREDENTIALS_FILE": layout.credentials_file,
                "STATE_DIR": layout.state_dir,
                "LOG_FILE": layout.log_file,
                "MUNGE_KEY_FILE": munge_key_file,
                "SECRET_ID": cloud.secret.name,
                **{variable: (FILES / file).read_text() for variable, file in PROGRAM_FILES.items()},
            },
            stdin=cloud.credentials,
            placed=True,
            # Removed before the destroy hook ends the instances: nothing launches more meanwhile.
            opts=child_options(self, opts, cloud.secret, cloud.terminator),
        )
        self.register_outputs({"base": layout.base})
