"""Each node image release's Slurm files, judged by that release's Slurm (tests/harness/slurm_release.py):
22.05 (bookworm) is this host's, 24.11 (trixie) a Debian 13 root made once. slurmd reads
slurm.conf, cgroup.conf and gres.conf, and slurmctld runs as primary controller, without one
complaint, for the tutorial stacks, accounting and a burst partition."""

import copy

import pytest

from components.composition.config import ClusterConfig
from components.composition.stack_config import parse_stack_config
from components.lxc.config import RELEASES
from components.slurm.slurm_conf import render_cgroup_conf, render_gres_conf
from tests.burst.stack import burst_stack
from tests.harness.program_harness import slurm_conf_of, stack_config
from tests.harness.slurm_release import judge, slurm_version


def configured(release: str, stack: str) -> ClusterConfig:
    if stack == "burst":
        raw = burst_stack()
    else:
        raw = {"cluster": copy.deepcopy(stack_config(stack.removesuffix("+accounting"))["cluster"])}
    raw["cluster"]["image"] = {"release": release}
    if stack.endswith("+accounting"):
        raw["cluster"]["accounting"] = {"name": "db", "nat_address": "10.43.3.20"}
    return parse_stack_config(raw).cluster


def verdict(config: ClusterConfig, slurm_conf: str | None = None):
    node = config.controller_node.name if config.controller_node else "gpuhost"
    text = slurm_conf or slurm_conf_of(config, node)
    return judge(
        config.image.release, text, render_cgroup_conf(), render_gres_conf(config), node, str(config.controller_address)
    )


@pytest.mark.parametrize("release", list(RELEASES))
def test_the_judge_is_the_release_slurm(release):
    major, minor = RELEASES[release].slurm
    assert f" {major}.{minor:02d}." in slurm_version(release)


@pytest.mark.parametrize("stack", ["e2e", "local", "e2e+accounting", "burst"])
@pytest.mark.parametrize("release", list(RELEASES))
def test_the_release_slurm_accepts_its_rendered_files(release, stack):
    config = configured(release, stack)
    assert config.image.slurm_version == RELEASES[release].slurm
    result = verdict(config)
    # No slurmdbd here, without which slurmctld does not start: slurmd's reading only.
    found = result.slurmd if stack.endswith("+accounting") else result.complaints
    assert found == [], "\n".join(found)


def test_slurm_2411_refuses_the_2205_rendering():
    # The judge can fail: 22.05's cloud settings are defunct in 24.11 (slurmctld says so).
    old = slurm_conf_of(configured("bookworm", "burst"), "c000")
    result = verdict(configured("trixie", "burst"), old)
    assert any("cloud_reg_addrs" in line and "defunct" in line for line in result.complaints), result
    assert any("NoAddrCache" in line for line in result.complaints), result


def test_slurm_2411_says_which_cgroup_option_is_defunct():
    config = configured("trixie", "e2e")
    node = config.controller_node.name
    result = judge(
        "trixie",
        slurm_conf_of(config, node),
        render_cgroup_conf() + "CgroupAutomount=yes\n",
        render_gres_conf(config),
        node,
        str(config.controller_address),
    )
    assert any("CgroupAutomount" in line for line in result.slurmd), result
