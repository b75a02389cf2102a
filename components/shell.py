"""Host commands: every pulumi-command resource runs a script kept under components/scripts/.

The script's text (shared helpers + the script) is the resource input, so a preview shows
its diff; parameters travel as environment variables, never pasted into shell text.
"""

from pathlib import Path

import pulumi
from pulumi_command import local

SCRIPTS_DIR = Path(__file__).parent / "scripts"
INTERPRETER = ["/bin/bash", "-c"]


def script(name: str) -> str:
    """The text of scripts/<name> preceded by the shared helpers in scripts/lib.sh."""
    lib = (SCRIPTS_DIR / "lib.sh").read_text()
    return f"{lib}\n# ---- {name} ----\n{(SCRIPTS_DIR / name).read_text()}"


def env_list(values) -> str:
    """Lists travel as one value per line (config types forbid newlines inside values)."""
    return "\n".join(str(value) for value in values)


def host_command(
    name: str,
    *,
    create: str,
    delete: str | None = None,
    environment: dict[str, pulumi.Input[str]],
    opts: pulumi.ResourceOptions,
    triggers: list | None = None,
) -> local.Command:
    """A Command on the local host running scripts/<create> (and <delete>).

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
