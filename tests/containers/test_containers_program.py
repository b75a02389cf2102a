"""The `containers:` section as the program reads and renders it (under mocks): what it
accepts and refuses, what a cluster with it builds (Enroot and Pyxis in the image, the prolog,
Pyxis in plugstack.conf, each node's Enroot files, the registries' CAs and the site's account
as a secret), and that a cluster without it keeps every input it had."""

import base64
import copy
import gzip
import io
import tarfile

import pytest

from components.composition.stack_config import ConfigError, parse_stack_config
from components.lxc.node_image import CONTAINER_SOURCES, container_sources_archive, third_party
from tests.harness.program_harness import run_program, stack_config

CA = "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIUQ2Vy\ndGlmaWNhdGU=\n-----END CERTIFICATE-----\n"
PASSWORD = "not-in-the-clear-7Qx"
SECRET = "registryPassword"


def with_containers(section: dict | None = None) -> dict:
    config = copy.deepcopy(stack_config("e2e"))
    config["cluster"]["containers"] = (
        section
        if section is not None
        else {
            "registries": [
                {"host": "registry.example:5443", "ca_cert": CA, "username": "puller", "password_secret": SECRET},
                {"host": "nvcr.io"},
            ]
        }
    )
    return config


def error_of(config: dict) -> str:
    with pytest.raises(ConfigError) as caught:
        parse_stack_config(config)
    return str(caught.value)


@pytest.mark.parametrize(
    ("registry", "field", "says"),
    [
        ({"host": "Registry.Example"}, "host", "should match pattern"),
        ({"host": "reg;rm -rf /"}, "host", "should match pattern"),
        ({"host": "r.example", "ca_cert": "not a certificate"}, "ca_cert", "should match pattern"),
        ({"host": "r.example", "password_secret": "no spaces"}, "password_secret", "should match pattern"),
        ({"host": "r.example", "username": "a b"}, "username", "should match pattern"),
    ],
)
def test_a_bad_registry_is_refused_naming_its_field(registry, field, says):
    message = error_of(with_containers({"registries": [registry]}))
    assert f"cluster.containers.registries[0].{field}" in message and says in message, message


@pytest.mark.parametrize("data_dir", ["/tmp/enroot", "/dev/shm", "/home/enroot", "/var/lib"])
def test_a_data_dir_people_could_write_or_a_system_directory_is_refused(data_dir):
    message = error_of(with_containers({"data_dir": data_dir}))
    assert "cluster.containers.data_dir" in message and repr(data_dir) in message, message


def test_limits_and_paths_are_checked():
    message = error_of(with_containers({"cache_limit_mb": 10, "data_dir": "relative/dir"}))
    assert "cluster.containers.cache_limit_mb" in message and "cluster.containers.data_dir" in message, message


def test_a_cluster_with_containers_builds_them_in_its_image_and_sets_up_every_node():
    run = run_program(with_containers(), stack="e2e", secrets={SECRET: PASSWORD})
    image = run.by_name("e2e-image-rootfs").inputs
    assert "CONTAINER_SOURCES_TGZ" in image["environment"]
    assert "squashfs-tools" in image["environment"]["PACKAGES"] and "containers" not in image["triggers"]
    controller = run.by_name("e2e-slurm-slurmctld").inputs["environment"]
    assert "required spank_pyxis.so" in controller["PLUGSTACK_CONF_TEXT"]
    assert "Prolog=/usr/local/sbin/gpucluster-prolog" in controller["SLURM_CONF_TEXT"]
    for node in ("c000", "c001", "c002", "c003"):
        setup = run.by_name(f"e2e-{node}-slurm-containers")
        assert setup.inputs["environment"]["CONTAINER"] == f"e2e-{node}"
        assert setup.inputs["environment"]["REGISTRY_CA_0"] == CA
        assert "REGISTRY_CA_1" not in setup.inputs["environment"]
        assert "/srv/gpucluster/e2e/shared /srv/gpucluster/e2e/shared" in setup.inputs["environment"]["MOUNTS"]
        assert run.depends_on(f"e2e-{node}-slurm-slurmd", f"e2e-{node}-slurm-containers")
        assert run.depends_on("e2e-health", f"e2e-{node}-slurm-containers")
    # The site's account: on stdin only, and secret there.
    stdin = run.by_name("e2e-c000-slurm-containers").inputs["stdin"]
    assert stdin["value"] == f"machine registry.example login puller password {PASSWORD}"
    assert stdin.get("4dabf18193072939515e22adb298388d") == "1b47061264138c4ac30d75fd1eb44270", "not a secret"
    for resource in run.resources:
        if resource.name.endswith("-containers"):
            continue
        assert PASSWORD not in repr(resource.inputs), resource.name


def with_section(value) -> dict:
    config = copy.deepcopy(stack_config("e2e"))
    config["cluster"]["containers"] = value
    return config


def test_a_cluster_without_containers_keeps_every_input():
    plain = run_program(with_section(None), stack="e2e")
    disabled = run_program(with_section({"enabled": False}), stack="e2e")
    assert not [r.name for r in plain.resources if r.name.endswith("-containers")]
    assert {r.urn: r.inputs for r in plain.resources} == {r.urn: r.inputs for r in disabled.resources}
    controller = plain.by_name("e2e-slurm-slurmctld").inputs["environment"]
    assert "PLUGSTACK_CONF_TEXT" not in controller and "Prolog" not in controller["SLURM_CONF_TEXT"]
    assert "CONTAINER_SOURCES_TGZ" not in plain.by_name("e2e-image-rootfs").inputs["environment"]


def test_containers_are_on_by_default_and_adding_them_keeps_the_image():
    default = run_program(stack_config("e2e"), stack="e2e")
    assert "containers" not in stack_config("e2e")["cluster"]
    assert {r.urn: r.inputs for r in default.resources} == {
        r.urn: r.inputs for r in run_program(with_section({}), stack="e2e").resources
    }
    assert [f"e2e-{n}-slurm-containers" for n in ("c000", "c001", "c002", "c003")] == sorted(
        r.name for r in default.resources if r.name.endswith("-containers")
    )
    # The image's trigger is the same with or without them: adding them replaces no node.
    plain = run_program(with_section(None), stack="e2e")
    image, plain_image = default.by_name("e2e-image-rootfs").inputs, plain.by_name("e2e-image-rootfs").inputs
    assert image["triggers"] == plain_image["triggers"]
    assert image["environment"]["IMAGE_DIGEST"] != plain_image["environment"]["IMAGE_DIGEST"]
    # Where a node of an image without them finds the image's build of them.
    node = default.by_name("e2e-c001-slurm-containers").inputs["environment"]
    assert node["IMAGE"] == "e2e-image" and "squashfs-tools" in node["RUNTIME_PACKAGES"]


def test_a_nodes_setup_keeps_the_urn_it_had_under_its_slurm_node():
    # It came out from under the node's SlurmNode to come before slurmctld: an alias keeps the
    # URN a cluster of the earlier program has, so the engine takes it over in place.
    run = run_program(stack_config("e2e"), stack="e2e")
    for node in ("c000", "c003"):
        setup = run.by_name(f"e2e-{node}-slurm-containers")
        slurm_node = run.by_name(f"e2e-{node}-slurm")
        assert setup.parent != slurm_node.urn
        earlier = slurm_node.urn.rsplit("::", 1)[0] + f"$command:local:Command::e2e-{node}-slurm-containers"
        # (The mocks chain the stack's type into their URNs; the engine and the SDK's aliases do not.)
        assert [alias.replace("::pulumi:pulumi:Stack$", "::") for alias in setup.aliases] == [earlier]


def test_burst_partitions_leave_containers_off_and_refuse_them_on():
    from tests.burst.stack import burst_stack

    config = parse_stack_config(burst_stack())
    assert config.cluster.containers is None and not config.cluster.containers_enabled
    with_burst = burst_stack()
    with_burst["cluster"]["containers"] = {}
    message = error_of(with_burst)
    assert "containers: burst nodes have no Enroot or Pyxis" in message and "enabled: false" in message, message
    with_burst["cluster"]["containers"] = {"enabled": False}
    assert not parse_stack_config(with_burst).cluster.containers_enabled


def test_the_sources_travel_whole_and_the_same_every_time():
    archive = container_sources_archive()
    container_sources_archive.cache_clear()
    assert container_sources_archive() == archive
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(base64.b64decode(archive)))) as sources:
        files = {m.name: sources.extractfile(m).read() for m in sources.getmembers() if m.isfile()}
    expected = {
        str(path.relative_to(third_party())): path.read_bytes()
        for folder in CONTAINER_SOURCES
        for path in (third_party() / folder).rglob("*")
        if path.is_file() and not path.is_symlink()
    }
    assert files == expected


PUSH_SECRET = "registryPushPassword"
PUSH_PASSWORD = "push-not-in-the-clear-3Kd"


def with_stack_registry(**fields) -> dict:
    return with_section({"registry": {"nat_address": "10.43.3.20", "push_password_secret": PUSH_SECRET, **fields}})


def test_the_stacks_registry_comes_before_every_node_which_trusts_its_ca():
    run = run_program(with_stack_registry(), stack="e2e", secrets={PUSH_SECRET: PUSH_PASSWORD})
    registry = run.by_name("e2e-registry-lxc").inputs
    environment = registry["environment"]
    assert environment["CONTAINER"] == "e2e-registry" and environment["NAT_ADDRESS"] == "10.43.3.20"
    assert (environment["PORT"], environment["PUSH_PORT"]) == ("5000", "5001")
    # Its data directory on the host, bound in: the images outlive the container.
    mount = "lxc.mount.entry = /var/lib/gpucluster/e2e/registry/store var/lib/gpucluster-registry "
    assert mount in environment["LXC_CONFIG"]
    assert "docker-registry" in environment["PACKAGES"] and registry["triggers"][0] == environment["RELEASE"]
    assert run.depends_on("e2e-registry-lxc", "e2e-registry-data")
    # The push password: on the account's stdin only, secret there; the container's command
    # has no secret input, so its output (the CA every node takes) is none either.
    account = run.by_name("e2e-registry-account").inputs
    assert account["environment"]["PUSH_USERNAME"] == "operator" and "stdin" not in registry
    assert account["stdin"]["value"] == PUSH_PASSWORD
    assert account["stdin"].get("4dabf18193072939515e22adb298388d") == "1b47061264138c4ac30d75fd1eb44270"
    assert run.depends_on("e2e-registry-account", "e2e-registry-lxc")
    for resource in run.resources:
        if resource.name != "e2e-registry-account":
            assert PUSH_PASSWORD not in repr(resource.inputs), resource.name
    for node in ("c000", "c003"):
        setup = run.by_name(f"e2e-{node}-slurm-containers")
        # The registry's stdout is its CA (empty under mocks, as in a preview).
        assert "REGISTRY_CA_STACK" in setup.inputs["environment"]
        assert run.depends_on(f"e2e-{node}-slurm-containers", "e2e-registry-lxc")
    # After a reboot the boot unit starts it (boot.sh), and ./verify.sh checks both registries.
    assert "REGISTRY_CONTAINER=e2e-registry\n" in run.by_name("e2e-boot-unit").inputs["environment"]["HOST_STATE_TEXT"]
    assert run.outputs["registry"]["pull"] == "10.43.3.20:5000"
    assert run.outputs["registry"]["push"] == "10.43.3.20:5001"


def test_a_renamed_registry_replaces_its_container_and_keeps_its_images():
    secrets = {PUSH_SECRET: PUSH_PASSWORD}
    before = run_program(with_stack_registry(), stack="e2e", secrets=secrets)
    after = run_program(with_stack_registry(name="images"), stack="e2e", secrets=secrets)
    old, new = before.by_name("e2e-registry-lxc").inputs, after.by_name("e2e-registry-lxc").inputs
    # A changed trigger: the old container (at the same address) goes before the new one comes.
    assert old["triggers"] != new["triggers"] and after.by_name("e2e-registry-lxc").delete_before_replace
    assert new["environment"]["CONTAINER"] == "e2e-images"
    assert before.by_name("e2e-registry-data").inputs == after.by_name("e2e-registry-data").inputs


def test_no_stack_registry_changes_nothing_and_containers_off_builds_none():
    plain = run_program(with_section({}), stack="e2e")
    assert not [r for r in plain.resources if r.name.startswith("e2e-registry")]
    assert "REGISTRY_CONTAINER" not in plain.by_name("e2e-boot-unit").inputs["environment"]["HOST_STATE_TEXT"]
    assert "registry" not in plain.outputs
    off = with_stack_registry()
    off["cluster"]["containers"]["enabled"] = False
    assert not [r for r in run_program(off, stack="e2e").resources if r.name.startswith("e2e-registry")]


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"push_port": 5000}, "containers.registry.push_port"),
        ({"name": "c001"}, "containers.registry.name: 'c001' is also a node"),
        ({"name": "image"}, "containers.registry.name: 'image'"),
        ({"nat_address": "10.43.3.3"}, "10.43.3.3"),
        ({"nat_address": "10.99.0.2"}, "containers.registry.nat_address: 10.99.0.2 is not a usable address"),
        ({"push_password_secret": None}, "containers.registry.push_password_secret"),
        ({"push_username": "a:b"}, "containers.registry.push_username"),
    ],
)
def test_a_bad_stack_registry_is_refused_naming_its_field(fields, says):
    message = error_of(with_stack_registry(**fields))
    assert says in message, message
