"""What the docs (docs/reboot-and-drift.md) and ./verify.sh tell a user to run after a reboot or on drift is what
really brings a host back: the boot unit's bring-up script, or a replace; never a plain or
refreshed `pulumi up`, which runs no script again when the inputs are unchanged."""

from components.composition.config import ClusterConfig
from components.composition.stack_config import parse_stack_config
from components.host.boot_unit import render_boot_unit
from tests.harness.docs import DOCS, bash_lines, doc_files
from tests.harness.program_harness import ROOT, run_program, stack_config

VERIFY_HOST = ROOT / "components" / "host" / "files" / "verify_host.sh"


def test_no_command_claims_pulumi_up_repairs_a_host():
    for path in doc_files():
        text = path.read_text()
        assert not [line for line in bash_lines(text) if "--refresh" in line], path
        assert "converges the host back" not in text, path
    assert "converges it" not in VERIFY_HOST.read_text()


def test_the_drift_message_runs_the_boot_units_own_command():
    config = stack_config("e2e")
    boot_command = run_program(config, stack="e2e").outputs["boot_command"]
    cluster: ClusterConfig = parse_stack_config(config).cluster
    drift = VERIFY_HOST.read_text().split('if [ "$drift" = 0 ]')[1]
    message = drift.replace("$CLUSTER_DIR", "/var/lib/gpucluster/e2e")
    assert f"run the boot script, {boot_command} (stack output boot_command)" in message
    assert f"ExecStart={boot_command}\n" in render_boot_unit(cluster.host_identity(cluster.cluster_hosts[0]))
    assert "./up.sh STACK --replace URN" in message


def test_the_docs_name_the_repairs_that_work():
    doc = (DOCS / "reboot-and-drift.md").read_text()
    assert "./up.sh STACK --replace URN" in doc and "boot_command" in doc
    assert "Neither\n`pulumi up` nor `pulumi up --refresh` repairs drift" in doc
