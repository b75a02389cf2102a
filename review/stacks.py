"""Stack files, checked before review: their JSON Schema, a validator, a starting file for a new site.

    python -m review.stacks schema            # (re)write stacks/schema.json from the pydantic models
    python -m review.stacks schema --check    # fail if stacks/schema.json is out of date
    python -m review.stacks validate [FILE...]   # every stacks/Pulumi.*.yaml by default
    python -m review.stacks new-site NAME [--nodes N] [--subnet 10.50] [--out FILE]

The schema is generated from components/composition/stack_config.py (StackConfig) and referenced from each
stack file's first line (`# yaml-language-server: $schema=./schema.json`) for editor completion.
`validate` parses each file with the program's own loader, so it prints the messages
`pulumi up` would print, naming each field.
"""

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
STACKS = ROOT / "stacks"
SCHEMA = STACKS / "schema.json"
HEADER = "# yaml-language-server: $schema=./schema.json"
REGENERATE = "venv/bin/python -m review.stacks schema"
NAME = re.compile(r"[a-z][a-z0-9]{0,9}")  # ClusterConfig.name: it prefixes bridges, containers and rules


def schema() -> dict[str, Any]:
    """JSON Schema of a stack file: `config:` with the `gpu-cluster:*` keys StackConfig accepts."""
    from components.composition.stack_config import NAMESPACE, StackConfig

    model = StackConfig.model_json_schema()
    # `cluster: X | None` is optional by leaving the key out; the schema names the model itself,
    # so an editor points at the field that is wrong rather than at the whole key.
    namespace = {
        f"{NAMESPACE}:{key}": next(option for option in prop["anyOf"] if option.get("type") != "null")
        for key, prop in model["properties"].items()
    }
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": f"Pulumi stack file of {NAMESPACE}",
        "description": f"Generated from components/composition/stack_config.py by `{REGENERATE}`; do not edit.",
        "type": "object",
        "properties": {
            "config": {
                "type": "object",
                "description": model.get("description", ""),
                "properties": namespace,
                # Other namespaces (e.g. aws:region) are the providers' business; unknown
                # keys of this project's namespace are errors, as in `pulumi up`.
                "patternProperties": {f"^{NAMESPACE}:(?!({'|'.join(model['properties'])})$)": False},
                "additionalProperties": True,
            },
        },
        "$defs": model["$defs"],
    }


def schema_text() -> str:
    return json.dumps(schema(), indent=2, sort_keys=True) + "\n"


def stack_files() -> list[Path]:
    return sorted(STACKS.glob("Pulumi.*.yaml"))


def namespace_keys(document: dict | None) -> dict[str, Any]:
    from components.composition.stack_config import NAMESPACE

    config = (document or {}).get("config") or {}
    return {k.removeprefix(f"{NAMESPACE}:"): v for k, v in config.items() if k.startswith(f"{NAMESPACE}:")}


def _secure(value: Any) -> bool:
    """A value `pulumi config set --secret` wrote: `{secure: <ciphertext>}`."""
    return isinstance(value, dict) and set(value) == {"secure"}


def _hints(details: list[dict]) -> list[str]:
    """Lines for what a YAML reader did to a value, where that is the likely mistake."""
    lines = []
    for detail in details:
        where = ".".join(str(part) if not isinstance(part, int) else f"[{part}]" for part in detail["loc"])
        where = where.replace(".[", "[")
        value = detail.get("input")
        if detail["type"] in ("int_type", "int_parsing") and isinstance(value, str) and value.strip().isdigit():
            lines.append(f"{where}: {value!r} is quoted, so YAML reads text: write {value.strip()} without quotes")
        elif detail["type"] == "string_type" and isinstance(value, int | float) and not isinstance(value, bool):
            lines.append(f"{where}: YAML read a number ({value}) here, e.g. 1:00:00 is read as 3600: quote the value")
    return lines


def missing_secrets(path: Path, document: dict | None) -> list[str]:
    """The secrets the stack names (hosts[].connection.private_key_secret) that its file lacks,
    each with the command that sets it."""
    from components.composition.stack_config import NAMESPACE

    config = (document or {}).get("config") or {}
    cluster = config.get(f"{NAMESPACE}:cluster") or {}
    stack = path.name.removeprefix("Pulumi.").removesuffix(".yaml")
    needed: dict[str, list[str]] = {}
    for host in cluster.get("hosts") or []:
        name = ((host or {}).get("connection") or {}).get("private_key_secret")
        if name and not _secure(config.get(f"{NAMESPACE}:{name}")):
            needed.setdefault(name, []).append(str(host.get("name")))
    return [
        f"secret {name} (hosts[].connection.private_key_secret: the SSH login key of {', '.join(hosts)}) is not set:"
        f" ./pulumi.sh config set --secret {name} --stack {stack} < ~/.ssh/id_ed25519"
        for name, hosts in needed.items()
    ]


def validate_file(path: Path) -> str | None:
    """None if the stack file is valid, else the message `pulumi up` would print for it, with
    hints (quoted numbers) and a note when rules across fields could not be checked yet."""
    from pydantic import ValidationError

    from components.composition.stack_config import NAMESPACE, StackConfig, _format, problems, unchecked_note

    try:
        document = yaml.safe_load(path.read_text())
    except yaml.YAMLError as error:
        return f"not valid YAML: {error}"
    if document is not None and not isinstance(document, dict):
        return "not a stack file: the top level must be a mapping with a `config:` key"
    # Secrets are the stack's own business (encrypted), not part of the typed config.
    raw = {key: value for key, value in namespace_keys(document).items() if not _secure(value)}
    try:
        StackConfig.model_validate(raw)
    except ValidationError as error:
        details, skipped = problems(raw, error)
        lines = [_format(details)] + [f"  - {hint}" for hint in _hints(details)] + unchecked_note(skipped)
        return f"invalid stack config ({NAMESPACE}):\n" + "\n".join(lines)
    return None


def validate(paths: list[Path]) -> int:
    failed = 0
    for path in paths:
        name = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
        if not path.is_file():
            failed += 1
            print(f"{name}: no such file")
            continue
        problem = validate_file(path)
        if problem:
            failed += 1
            print(f"{name}: {problem}")
            continue
        secrets = missing_secrets(path, yaml.safe_load(path.read_text()))
        if secrets:
            print(f"{name}: ok, but before `pulumi up` it needs:")
            print("".join(f"  - {line}\n" for line in secrets), end="")
        else:
            print(f"{name}: ok")
    return 1 if failed else 0


def new_site(name: str, nodes: int = 2, subnet: str = "10.50") -> str:
    """A valid starting stack file for a site with `nodes` nodes and one GPU: the first node
    owns it, split into as many Slurm shards as there are nodes, the others have none."""
    from components.composition.stack_config import NAMESPACE, parse_stack_config

    short = name[:9]
    cluster = {
        "name": name,
        "image": {"release": "trixie"},  # Debian 13, Slurm 24.11
        "host": {"shared_dir": f"/srv/gpucluster/{name}/shared"},
        "network": {
            "nat_bridge": {"name": f"{short}br0", "address": f"{subnet}.3.1/24"},
            "cluster_bridge": {"name": f"{short}br1", "subnet": f"{subnet}.5.0/24"},
        },
        "gpu": {"devices": ["/dev/nvidia0"]},
        "nodes": [
            {"name": f"c{i:03d}", "nat_address": f"{subnet}.3.{2 + i}", "cluster_address": f"{subnet}.5.{1 + i}"}
            for i in range(nodes)
        ],
        "slurm": {
            "controller": {"placement": "container", "node": "c000"},
            "partitions": [{"name": "gpu", "default": True}],
        },
    }
    if nodes > 1:
        # A job per shard at once needs a core each on the GPU's node.
        cluster["nodes"][0] |= {"cpus": nodes, "gpu_shards": nodes}
        for node in cluster["nodes"][1:]:
            node["gpus"] = 0
    parse_stack_config({"cluster": cluster})  # refuse to write what `pulumi up` would refuse
    body = yaml.safe_dump({"config": {f"{NAMESPACE}:cluster": cluster}}, sort_keys=False, default_flow_style=None)
    return (
        f"{HEADER}\n"
        f"# Site {name}: {nodes} node(s); c000 has /dev/nvidia0"
        + (f", which {nodes} jobs may share (Slurm shards: --gres=shard:1)" if nodes > 1 else "")
        + ". Adjust devices, addresses and partitions;\n"
        "# keys and accepted values: components/composition/config.py. "
        "Check with `venv/bin/python -m review.stacks validate`.\n"
        f"{body}"
    )


def main(argv: list[str] | None = None) -> int:
    sys.path.insert(0, str(ROOT))
    parser = argparse.ArgumentParser(prog="python -m review.stacks", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    schema_cmd = commands.add_parser("schema", help=f"write {SCHEMA.relative_to(ROOT)}")
    schema_cmd.add_argument("--check", action="store_true", help="fail if the committed schema is out of date")
    validate_cmd = commands.add_parser("validate", help="validate stack files (default: all of stacks/)")
    validate_cmd.add_argument("files", nargs="*", type=Path)
    new_cmd = commands.add_parser("new-site", help="write a valid starting stack file")
    new_cmd.add_argument("name")
    new_cmd.add_argument("--nodes", type=int, default=2)
    new_cmd.add_argument("--subnet", default="10.50", help="first two octets of the site's subnets")
    new_cmd.add_argument("--out", type=Path, help="default: stacks/Pulumi.NAME.yaml; - for stdout")
    args = parser.parse_args(argv)

    if args.command == "schema":
        text = schema_text()
        if args.check:
            if not SCHEMA.exists() or SCHEMA.read_text() != text:
                print(f"{SCHEMA.relative_to(ROOT)} is out of date with components/: run `{REGENERATE}`")
                return 1
            print(f"{SCHEMA.relative_to(ROOT)}: up to date")
            return 0
        SCHEMA.write_text(text)
        print(f"wrote {SCHEMA.relative_to(ROOT)}")
        return 0
    if args.command == "validate":
        return validate([p.resolve() for p in args.files] or stack_files())
    if not NAME.fullmatch(args.name):
        print(
            f"error: {args.name!r} is not a cluster name: lower-case letters and digits, starting with a"
            " letter, at most 10 characters (no dash, no capitals)",
            file=sys.stderr,
        )
        return 2
    if args.nodes < 1:
        print(f"error: --nodes {args.nodes}: a site has at least one node", file=sys.stderr)
        return 2
    text = new_site(args.name, args.nodes, args.subnet)
    if str(args.out) == "-":
        sys.stdout.write(text)
        return 0
    out = args.out or STACKS / f"Pulumi.{args.name}.yaml"
    if out.exists():
        print(f"{out} exists; not overwriting it")
        return 1
    out.write_text(text)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    from review.cli import run

    sys.exit(run(main))
