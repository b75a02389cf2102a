"""MIG-ready device paths: a device under /dev keeps its path in a node, so the capability
devices of MIG stay in /dev/nvidia-caps/ (the H100 review of 2026-11-25, finding 6: they were
flattened to /dev/nvidia-capN); the config accepts them and names the field of a bad one.
Stand-ins (made in the cluster's private device directory) still appear as /dev/<name>."""

from components.common.rendering import container_device_path
from components.composition.config import ClusterConfig
from components.lxc.lxc_conf import ContainerSpec, render_lxc_config
from components.slurm.slurm_conf import render_gres_conf
from tests.test_config import error_of, local_cluster

CAPS = ["/dev/nvidia-caps/nvidia-cap1", "/dev/nvidia-caps/nvidia-cap2"]


def mig_cluster() -> dict:
    cluster = local_cluster()
    cluster["gpu"]["control_devices"] = ["/dev/nvidiactl", "/dev/nvidia-uvm", *CAPS]
    return cluster


def test_a_device_under_dev_keeps_its_path_and_a_stand_in_gets_its_name():
    assert container_device_path("/dev/nvidia-caps/nvidia-cap1") == "/dev/nvidia-caps/nvidia-cap1"
    assert container_device_path("/dev/nvidia0") == "/dev/nvidia0"
    assert container_device_path("/run/gpucluster-e2e-dev/nvidia3") == "/dev/nvidia3"


def test_the_config_accepts_mig_capability_devices_and_binds_them_at_their_path():
    config = ClusterConfig.model_validate(mig_cluster())
    node = config.nodes[0]
    spec = ContainerSpec(node.name, node.nat_address, node.cluster_address, config.gpu_assignment()[node.name])
    text = render_lxc_config(spec, config.network, config.gpu, config.host.shared_dir, "gpu-c000")
    for cap in CAPS:
        assert f"lxc.mount.entry = {cap} {cap[1:]} none bind,optional,create=file 0 0" in text.splitlines()
    # The GPU itself is still /dev/nvidia0 in gres.conf.
    assert "File=/dev/nvidia0" in render_gres_conf(config)


def test_a_bad_name_under_nvidia_caps_names_the_field():
    cluster = mig_cluster()
    cluster["gpu"]["control_devices"][3] = "/dev/nvidia-caps/caps-of-mine"
    message = error_of(cluster)
    assert "cluster.gpu.control_devices[3]: /dev/nvidia-caps/caps-of-mine is under /dev/nvidia-caps/" in (message)
