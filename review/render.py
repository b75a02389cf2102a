"""Offline render of a stack: every generated file and a resource list, without CLI or credentials.

    python -m review.render STACK OUTDIR [--root TREE]

Runs the program (of this repository, or of TREE: a checkout of another commit) under mocks
for stacks/Pulumi.STACK.yaml and writes, deterministically byte for byte:

    resources.yaml             every resource: type, parent, dependencies, key inputs
    files/<resource>/<name>    text a command's environment carries (slurm.conf, gres.conf,
                               the LXC config, the web app, lists), one file per variable
    scripts/<name>             the scripts commands run, each once, and the helper files they
                               include (scripts/lib/<name>)
    manifests/<resource>.yaml  the inputs of every other resource (Kubernetes objects, Helm values)

Values marked secret are written as `[secret]`, and key-shaped text is scrubbed (review/scrub.py).
"""

import argparse
import hashlib
import re
import shutil
import sys
from pathlib import Path
from typing import Any

import yaml

from review.scrub import scrub

SECRET = "[secret]"
# Environment variables whose text is a file with a well-known name.
FILE_NAMES = {
    "SLURM_CONF_TEXT": "slurm.conf",
    "GRES_CONF_TEXT": "gres.conf",
    "LXC_CONFIG": "config",
    "APP_SOURCE": "app.py",
    "APP_HANDLERS_SOURCE": "web_handlers.py",
    "APP_PAGE_SOURCE": "web_page.py",
    "USER_DATA": "cloud-init.yaml",
    "UNIT_TEXT": "unit.service",
    "HOST_STATE_TEXT": "host-state.env",
}
# Variables holding a base64 gzipped tar (Enroot's and Pyxis' sources for the node image): a
# diff of them is its digest and size; their text is the sources', in the program's tree.
ARCHIVE_SUFFIX = "_TGZ"
# transport.script() puts a header line before each helper file and before the script.
SCRIPT_HEADER = re.compile(r"^# ---- (?P<name>[\w.-]+) ----$", re.MULTILINE)
LIB_HEADER = re.compile(r"^# ---- lib/(?P<name>[\w.-]+) ----$", re.MULTILINE)
COMMAND_TYPES = ("command:local:Command", "command:remote:Command")


def _is_secret(value: Any) -> bool:
    from pulumi.runtime.rpc import is_rpc_secret

    return is_rpc_secret(value)


def _plain(value: Any) -> Any:
    """Inputs as plain data: secrets redacted, assets by their path or text."""
    if _is_secret(value):
        return SECRET
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in sorted(value.items())}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, str):
        return scrub(value)
    if value is None or isinstance(value, int | float | bool):
        return value
    return repr(value)


def _archive(value: str) -> str:
    return f"<archive sha256:{hashlib.sha256(value.encode()).hexdigest()[:16]}, {len(value)} bytes of base64>"


def _dump(document: Any) -> str:
    return yaml.safe_dump(document, sort_keys=False, default_flow_style=False, width=100_000, allow_unicode=True)


class _Block(str):
    """A multi-line string YAML writes as a literal block, so its lines diff one by one."""


def _block(dumper: yaml.SafeDumper, text: str) -> yaml.ScalarNode:
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style="|" if "\n" in text else None)


class _ManifestDumper(yaml.SafeDumper):
    pass


_ManifestDumper.add_representer(str, _block)


class _Writer:
    """Collects output files by relative path; refuses two different texts under one name."""

    def __init__(self):
        self.files: dict[str, str] = {}

    def add(self, path: str, text: str) -> str:
        text = scrub(text)
        if self.files.get(path, text) != text:
            digest = hashlib.sha256(text.encode()).hexdigest()[:8]
            stem, dot, suffix = path.rpartition(".")
            path = f"{stem}~{digest}.{suffix}" if dot and "/" not in suffix else f"{path}~{digest}"
        self.files[path] = text
        return path


def _script(writer: _Writer, resource: str, field: str, text: str) -> str:
    """Write a command's script once under scripts/ and name what it runs."""
    matches = list(SCRIPT_HEADER.finditer(text))
    match = matches[-1] if matches else None
    if not match:
        return writer.add(f"files/{resource}/{field}.sh", text)
    helpers, body = text[: match.start()], text[match.end() + 1 :]
    parts = list(LIB_HEADER.finditer(helpers))
    if not parts:  # a tree from before the helpers were split: one lib.sh
        return " + ".join([writer.add("scripts/lib.sh", helpers), writer.add(f"scripts/{match['name']}", body)])
    names = [writer.add("scripts/prelude.sh", helpers[: parts[0].start()])] if parts[0].start() else []
    for part, following in zip(parts, [*parts[1:], None], strict=True):
        end = following.start() if following else len(helpers)
        names.append(writer.add(f"scripts/lib/{part['name']}", helpers[part.end() + 1 : end]))
    return " + ".join([*names, writer.add(f"scripts/{match['name']}", body)])


def _command_entry(writer: _Writer, name: str, inputs: dict) -> dict:
    entry: dict[str, Any] = {}
    for field in ("create", "update", "delete"):
        if field in inputs:
            value = inputs[field]
            entry[field] = SECRET if _is_secret(value) else _script(writer, name, field, value)
    environment = inputs.get("environment") or {}
    if _is_secret(environment):
        entry["environment"] = SECRET
    else:
        entry["environment"] = {}
        for key, value in sorted(environment.items()):
            if _is_secret(value):
                entry["environment"][key] = SECRET
            elif isinstance(value, str) and key.endswith(ARCHIVE_SUFFIX):
                entry["environment"][key] = _archive(value)
            elif isinstance(value, str) and SCRIPT_HEADER.search(value):  # a script the command installs
                entry["environment"][key] = f"<{_script(writer, name, key, value)}>"
            elif isinstance(value, str) and "\n" in value:
                path = writer.add(f"files/{name}/{FILE_NAMES.get(key, key)}", value.rstrip("\n") + "\n")
                entry["environment"][key] = f"<{path}>"
            else:
                entry["environment"][key] = _plain(value)
    for key, value in sorted(inputs.items()):
        if key not in ("create", "update", "delete", "environment"):
            entry[key] = _plain(value)
    return entry


def render_run(run) -> dict[str, str]:
    """The rendered files of one mocked program run, by relative path."""
    names = {r.urn: r.name for r in run.resources}

    def name_of(urn: str) -> str:
        return names.get(urn, urn.rsplit("::", 1)[-1])

    writer = _Writer()
    listing: dict[str, dict] = {}
    for resource in sorted(run.resources, key=lambda r: (r.name, r.urn)):
        key = resource.name if resource.name not in listing else resource.urn
        entry: dict[str, Any] = {"type": resource.type, "parent": name_of(resource.parent)}
        if resource.dependencies:
            entry["depends_on"] = sorted(name_of(urn) for urn in resource.dependencies)
        if resource.delete_before_replace:
            entry["delete_before_replace"] = True
        if resource.type in COMMAND_TYPES:
            entry["inputs"] = _command_entry(writer, resource.name, resource.inputs)
        elif resource.custom:
            manifest = yaml.dump(_plain(resource.inputs), Dumper=_ManifestDumper, sort_keys=True, width=100_000)
            entry["inputs"] = f"<{writer.add(f'manifests/{resource.name}.yaml', manifest)}>"
        listing[key] = entry
    writer.files["resources.yaml"] = _dump(listing)
    # Values were scrubbed one by one (so YAML quotes the marks); this pass catches the rest.
    return {path: scrub(text) for path, text in sorted(writer.files.items())}


def render(stack: str, outdir: Path, root: Path | None = None) -> dict[str, str]:
    """Render `stack` of the program in `root` (default: this repository) into `outdir`."""
    from review import program

    if root is not None:
        root = root.resolve()
        if "components" in sys.modules and not str(sys.modules["components"].__path__[0]).startswith(str(root)):
            raise RuntimeError("render another tree in a fresh interpreter (python -m review.render --root)")
        sys.path.insert(0, str(root))
        program.ROOT = root
    config = program.stack_config(stack)
    files = render_run(program.run_program(config, stack=stack, secrets=_placeholder_secrets(config)))
    write(files, outdir)
    return files


def _placeholder_secrets(config: dict) -> dict[str, str]:
    """The stack's secret config keys (an SSH host's private key) as placeholders: a render
    needs no credentials, and secret values are written as [secret] anyway."""
    hosts = (config.get("cluster") or {}).get("hosts") or []
    names = [
        host["connection"]["private_key_secret"]
        for host in hosts
        if isinstance(host, dict)
        and isinstance(host.get("connection"), dict)
        and "private_key_secret" in host["connection"]
    ]
    return dict.fromkeys(names, "placeholder")


def write(files: dict[str, str], outdir: Path) -> None:
    """Replace `outdir` (empty, missing, or an earlier render) with `files`."""
    if outdir.exists():
        if any(outdir.iterdir()) and not (outdir / "resources.yaml").exists():
            raise SystemExit(f"{outdir} is not empty and holds no earlier render; refusing to overwrite it")
        shutil.rmtree(outdir)
    for path, text in files.items():
        target = outdir / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m review.render", description=__doc__.split("\n\n")[0])
    parser.add_argument("stack", help="stack name: stacks/Pulumi.STACK.yaml")
    parser.add_argument("outdir", type=Path)
    parser.add_argument("--root", type=Path, help="the program's tree (default: this repository)")
    args = parser.parse_args(argv)
    try:
        files = render(args.stack, args.outdir, args.root)
    except Exception as error:
        if type(error).__name__ != "ConfigError":  # the program's own message, as `pulumi up` prints it
            raise
        print(error, file=sys.stderr)
        return 1
    print(f"{args.outdir}: {len(files)} files")
    return 0


if __name__ == "__main__":
    from review.cli import run

    sys.exit(run(main))
