"""A failed CLI run's message starts with what failed: the CLI's `Diagnostics:` section."""

from tests.harness.engine import diagnostics

OUTPUT = """Updating (e2e):
 +  command:local:Command e2e-image-rootfs creating (0s) I: Retrieving adduser 3.134
Diagnostics:
  command:local:Command (e2e-image-rootfs):
    error: exit status 1: debootstrap failed

  pulumi:pulumi:Stack (gpu-cluster-e2e):
    error: update failed

Outputs:
    web_url: "http://10.43.3.1:7000/"

Resources:
    + 24 created
    2 errored
"""


def test_the_diagnostics_are_cut_from_the_progress_and_the_outputs():
    found = diagnostics(OUTPUT)
    assert found.startswith("Diagnostics:\n  command:local:Command (e2e-image-rootfs):")
    assert "debootstrap failed" in found and "update failed" in found
    assert "Retrieving" not in found and "web_url" not in found and "errored" not in found


def test_an_output_without_diagnostics_adds_nothing():
    assert diagnostics("Updating (e2e):\nResources:\n    + 1 created\n") == ""
