"""The mocked program's generated SSH host keys are stable per stack and name, byte for byte:
two runs of the same stack plan no change (an EC2 instance's user data holds the key)."""

from review.program import _ed25519_openssh
from tests.aws.test_ec2 import SECRETS
from tests.harness.plan import plan, records
from tests.harness.program_harness import run_program, stack_config


def test_the_same_seed_gives_the_same_openssh_text():
    assert _ed25519_openssh(b"s" * 32) == _ed25519_openssh(b"s" * 32)


def test_two_runs_of_the_ec2_stack_plan_nothing():
    first = records(run_program(stack_config("ec2"), stack="ec2", secrets=SECRETS))
    second = records(run_program(stack_config("ec2"), stack="ec2", secrets=SECRETS))
    assert {step.urn.rsplit("::", 1)[1]: step.changed for step in plan(first, second) if step.action != "same"} == {}
