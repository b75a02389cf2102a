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
    assert done.stdout.splitlines() == [f"stacks/{p.name}: ok" for p in STACK_FILES]


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
    from components.stack_config import ConfigError
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
