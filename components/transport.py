"""Host commands: every pulumi-command resource runs a script kept in a component's files/.

The script's text (shared helpers + the script) is the resource input, so a preview shows
its diff; parameters travel as environment variables, never pasted into shell text.
This is the only module that creates pulumi-command resources.
"""

from pathlib import Path

import pulumi
from pulumi_command import local

# The shared helpers are part of every command's input, on purpose: an edit to lib.sh changes
# every command's `create` (and `delete`), so the next `up` runs every create script again as an
# update in place (never a replace: lib.sh is no trigger). Creates converge and are safe to
# repeat, so this costs one pass over the cluster and guarantees that no command keeps running
# helpers older than the repository's. The header names the bare file name, not its folder, so
# moving a script changes no input (tests/upgrade/ proves both).
LIB = Path(__file__).parent / "files" / "lib.sh"
INTERPRETER = ["/bin/bash", "-c"]


def script(path: Path) -> str:
    """The text of the script at `path` preceded by the shared helpers in files/lib.sh."""
    if not isinstance(path, Path):
        raise TypeError(f"script wants the path of a file (e.g. FILES / 'x.sh'), got {path!r}")
    return f"{LIB.read_text()}\n# ---- {path.name} ----\n{path.read_text()}"


def env_list(values) -> str:
    """Lists travel as one value per line (config types forbid newlines inside values)."""
    return "\n".join(str(value) for value in values)


def host_command(
    name: str,
    *,
    create: Path,
    delete: Path | None = None,
    environment: dict[str, pulumi.Input[str]],
    opts: pulumi.ResourceOptions,
    triggers: list | None = None,
) -> local.Command:
    """A Command on the local host running the script at `create` (and `delete`).

    Components pass paths in their own files/ folder: `create=FILES / "x_create.sh"`.
    A changed trigger replaces the resource; any other changed input runs the create script
    again (pulumi-command's behaviour without an `update`), so every create converges the
    host to its inputs and is safe to repeat.
    """
    return local.Command(
        name,
        create=script(create),
        delete=script(delete) if delete else None,
        environment=environment,
        interpreter=INTERPRETER,
        triggers=triggers,
        opts=opts,
    )
