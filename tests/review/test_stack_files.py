"""Stack files: the committed schema is current, every stack validates, broken ones name the field."""

import json
import subprocess
import sys

import jsonschema
import pytest
import yaml

from review.stacks import HEADER, REGENERATE, ROOT, SCHEMA, new_site, schema_text, stack_files
from tests.harness.program_harness import fixture_file

STACK_FILES = stack_files()


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "review.stacks", *args], cwd=ROOT, capture_output=True, text=True)


def _validator() -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(json.loads(SCHEMA.read_text()))


def test_committed_schema_is_up_to_date():
    assert SCHEMA.read_text() == schema_text(), f"stacks/schema.json is out of date: run `{REGENERATE}`"
    done = _cli("schema", "--check")
    assert done.returncode == 0, done.stdout


@pytest.mark.parametrize("path", STACK_FILES, ids=lambda p: p.name)
def test_every_stack_file_references_the_schema_and_matches_it(path):
    assert path.read_text().splitlines()[0] == HEADER
    errors = [e.message for e in _validator().iter_errors(yaml.safe_load(path.read_text()))]
    assert errors == []


def test_every_stack_file_validates():
    done = _cli("validate")
    assert done.returncode == 0, done.stdout
    firsts = [line for line in done.stdout.splitlines() if not line.startswith("  - secret ")]
    assert [line.removesuffix(", but before `pulumi up` it needs:") for line in firsts] == [
        f"stacks/{p.name}: ok" for p in STACK_FILES
    ]


def test_a_broken_stack_fails_with_the_field_named(tmp_path):
    document = yaml.safe_load(fixture_file("local").read_text())
    cluster = document["config"]["gpu-cluster:cluster"]
    cluster["web_app"]["port"] = 70000
    cluster["colour"] = "blue"
    broken = tmp_path / "Pulumi.broken.yaml"
    broken.write_text(yaml.safe_dump(document))
    # A rule across fields (checked once every field is valid) names its field too.
    crossed = yaml.safe_load(fixture_file("local").read_text())
    crossed["config"]["gpu-cluster:cluster"]["nodes"][2]["nat_address"] = "10.99.0.2"
    broken_rule = tmp_path / "Pulumi.crossed.yaml"
    broken_rule.write_text(yaml.safe_dump(crossed))
    done = _cli("validate", str(broken), str(broken_rule), str(fixture_file("local")))
    assert done.returncode == 1
    assert done.stdout.count("invalid stack config (gpu-cluster):") == 2
    assert "  - cluster.colour: Extra inputs are not permitted" in done.stdout
    assert "  - cluster.web_app.port: Input should be less than or equal to 65535" in done.stdout
    assert "  - cluster.nodes[2].nat_address: 10.99.0.2 is not a usable address" in done.stdout
    assert done.stdout.rstrip().endswith("stacks/Pulumi.local.yaml: ok")
    # The editor sees the same fields through the schema.
    errors = {"/".join(map(str, e.absolute_path)): e.message for e in _validator().iter_errors(document)}
    assert "'colour' was unexpected" in errors["config/gpu-cluster:cluster"]
    assert "config/gpu-cluster:cluster/web_app" in errors


def test_the_same_message_as_pulumi_up(tmp_path):
    """validate prints what the program raises when `pulumi up` loads the stack."""
    from components.composition.stack_config import ConfigError
    from review.program import run_program

    config = yaml.safe_load(fixture_file("local").read_text())["config"]
    config["gpu-cluster:cluster"]["nodes"][0]["cpus"] = 0
    broken = tmp_path / "Pulumi.broken.yaml"
    broken.write_text(yaml.safe_dump({"config": config}))
    with pytest.raises(ConfigError) as raised:
        run_program({"cluster": config["gpu-cluster:cluster"]})
    assert str(raised.value) in _cli("validate", str(broken)).stdout


@pytest.mark.parametrize("nodes", [1, 3])
def test_a_new_site_file_validates(tmp_path, nodes):
    out = tmp_path / "Pulumi.lab.yaml"
    done = _cli("new-site", "lab", "--nodes", str(nodes), "--out", str(out))
    assert done.returncode == 0, done.stdout
    assert out.read_text() == new_site("lab", nodes)
    assert out.read_text().splitlines()[0] == HEADER
    assert _cli("validate", str(out)).returncode == 0
    assert list(_validator().iter_errors(yaml.safe_load(out.read_text()))) == []
    assert len(yaml.safe_load(out.read_text())["config"]["gpu-cluster:cluster"]["nodes"]) == nodes
    assert _cli("new-site", "lab", "--out", str(out)).returncode == 1  # never overwrites


def test_validate_names_each_missing_secret_and_the_command_that_sets_it(tmp_path):
    document = yaml.safe_load(fixture_file("twohost").read_text())
    stack = tmp_path / "Pulumi.lab.yaml"
    stack.write_text(yaml.safe_dump(document))
    done = _cli("validate", str(stack))
    assert done.returncode == 0 and done.stderr == ""
    assert done.stdout.splitlines() == [
        f"{stack}: ok, but before `pulumi up` it needs:",
        "  - secret gpu2SshKey (hosts[].connection.private_key_secret: the SSH login key of gpu2) is not set:"
        " ./pulumi.sh config set --secret gpu2SshKey --stack lab < ~/.ssh/id_ed25519",
    ]
    # Set (as `pulumi config set --secret` writes it): no longer missing, and no unknown key.
    document["config"]["gpu-cluster:gpu2SshKey"] = {"secure": "v1:abc"}
    stack.write_text(yaml.safe_dump(document))
    done = _cli("validate", str(stack))
    assert done.stdout == f"{stack}: ok\n"


def test_validate_reports_every_field_error_hints_quoted_numbers_and_says_more_may_follow(tmp_path):
    document = yaml.safe_load(fixture_file("local").read_text())
    cluster = document["config"]["gpu-cluster:cluster"]
    cluster["web_app"]["host_port"] = "7000"
    cluster["nodes"][1]["nat_adress"] = cluster["nodes"][1].pop("nat_address")
    cluster["slurm"]["partitions"][0]["max_time"] = 3600  # what YAML 1.1 makes of 1:00:00
    cluster["nodes"][2]["nat_address"] = "10.42.4.4"  # its rule also reads nodes[1]'s, which is missing
    broken = tmp_path / "Pulumi.broken.yaml"
    broken.write_text(yaml.safe_dump(document))
    done = _cli("validate", str(broken))
    assert done.returncode == 1 and "Traceback" not in done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert "  - cluster.nodes[1].nat_adress: Extra inputs are not permitted" in lines
    assert "  - cluster.web_app.host_port: Input should be a valid integer" in lines
    assert "  - cluster.web_app.host_port: '7000' is quoted, so YAML reads text: write 7000 without quotes" in lines
    assert any(line.startswith("  - cluster.slurm.partitions[0].max_time: YAML read a number (3600)") for line in lines)
    assert lines[-1].endswith("are checked once these are fixed: more may follow)")


def test_validate_shows_a_field_error_and_a_cross_field_error_in_one_run(tmp_path):
    document = yaml.safe_load(fixture_file("local").read_text())
    cluster = document["config"]["gpu-cluster:cluster"]
    cluster["nodes"][0]["cpus"] = "2"
    cluster["nodes"][3]["nat_address"] = cluster["nodes"][2]["nat_address"]
    cluster["network"]["cluster_bridge"]["subnet"] = "10.42.0.0/16"
    stack = tmp_path / "Pulumi.lab.yaml"
    stack.write_text(yaml.safe_dump(document))
    done = _cli("validate", str(stack))
    assert done.returncode == 1 and done.stderr == ""
    assert done.stdout.splitlines() == [
        f"{stack}: invalid stack config (gpu-cluster):",
        "  - cluster.nodes[0].cpus: Input should be a valid integer",
        "  - cluster.network.cluster_bridge.subnet: 10.42.0.0/16 overlaps the nat_bridge subnet 10.42.3.0/24;"
        " use disjoint subnets",
        "  - cluster.nodes[].nat_address: 10.42.3.4 is assigned more than once "
        "(nodes, web_app, login, accounting, metrics and the controller's container)",
        "  - cluster.nodes[0].cpus: '2' is quoted, so YAML reads text: write 2 without quotes",
    ]


def test_a_missing_file_is_named(tmp_path):
    done = _cli("validate", str(tmp_path / "Pulumi.none.yaml"))
    assert done.returncode == 1 and done.stdout == f"{tmp_path / 'Pulumi.none.yaml'}: no such file\n"


@pytest.mark.parametrize("name", ["Lab", "my-lab", "verylongname123", "1lab"])
def test_new_site_refuses_a_bad_name_in_words(name):
    done = _cli("new-site", name, "--out", "-")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == (
        f"error: {name!r} is not a cluster name: lower-case letters and digits, starting with a letter,"
        " at most 10 characters (no dash, no capitals)\n"
    )


def test_new_site_refuses_no_nodes_and_a_bad_subnet_without_a_traceback():
    done = _cli("new-site", "lab", "--nodes", "0", "--out", "-")
    assert done.returncode == 2 and done.stderr == "error: --nodes 0: a site has at least one node\n"
    done = _cli("new-site", "lab", "--subnet", "10.500", "--out", "-")
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "cluster.nodes[0].nat_address: Input is not a valid IPv4 address" in done.stderr


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["review.render", "nosuch", "OUT"], "stacks/Pulumi.nosuch.yaml: no such file"),
        (["review.diff", "local", "--base", "nosuchref"], "`git archive --format=tar nosuchref` failed: fatal:"),
        (["review.summary", "local", "--out", "OUT", "--diff", "/nonexistent"], "error: /nonexistent: no such file"),
    ],
)
def test_the_review_tools_name_a_users_mistake_without_a_traceback(tmp_path, argv, message):
    argv = [str(tmp_path / "out") if arg == "OUT" else arg for arg in argv]
    done = subprocess.run([sys.executable, "-m", *argv], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert message in done.stderr
