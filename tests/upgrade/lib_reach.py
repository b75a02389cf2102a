"""How many commands an edit to each shared helper file runs again, per stack.

Run: `venv/bin/python -m tests.upgrade.lib_reach [STACK...]` (default: e2e and local). The
program runs under mocks (tests/harness); a command is counted for a helper file when one of
its inputs (create, update, delete, or a script its environment carries, like the boot unit's)
includes that file's text, which is what an edit to the file changes.
"""

import sys

from components.common import transport
from tests.harness.plan import records
from tests.harness.program_harness import run_program, stack_config

COMMAND_TYPES = ("command:local:Command", "command:remote:Command")


def _texts(inputs) -> list[str]:
    """Every string among a resource's inputs, nested ones included."""
    if isinstance(inputs, str):
        return [inputs]
    if isinstance(inputs, dict):
        return [text for value in inputs.values() for text in _texts(value)]
    if isinstance(inputs, list | tuple):
        return [text for value in inputs for text in _texts(value)]
    return []


def commands(stack: str) -> list[dict]:
    found = records(run_program(stack_config(stack), stack=stack))
    # The script stores' shipping runs no helper: it copies them.
    return [r for r in found if r["type"] in COMMAND_TYPES and not r["name"].endswith("-scripts")]


def reach(stack: str) -> tuple[int, dict[str, list[str]]]:
    """The number of commands, and per helper file the names of the commands that include it."""
    found = commands(stack)
    by_file = {}
    for name in transport.library():
        header = f"# ---- lib/{name} ----\n"
        by_file[name] = [record["name"] for record in found if any(header in text for text in _texts(record["inputs"]))]
    return len(found), by_file


if __name__ == "__main__":
    stacks = sys.argv[1:] or ["e2e", "local"]
    tables = {stack: reach(stack) for stack in stacks}
    print("| helper file | " + " | ".join(f"{stack} (of {tables[stack][0]})" for stack in stacks) + " |")
    print("|---|" + "---|" * len(stacks))
    for name in transport.library():
        print(f"| {name} | " + " | ".join(str(len(tables[stack][1][name])) for stack in stacks) + " |")
