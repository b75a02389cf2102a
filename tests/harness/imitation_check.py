"""What tests/harness/command_executor.py (the imitation the AWS e2e tests still use) plans
for a change of the `e2e` stack, to compare with what the real engine did on the same change."""

from tests.harness.command_executor import State, StateEntry, _replaced_with, host_commands, plan
from tests.harness.program_harness import run_program


def _planned(old_config: dict | None, new_config: dict, stack: str):
    old = host_commands(run_program(old_config, stack=stack)) if old_config else []
    new = host_commands(run_program(new_config, stack=stack))
    state = State({c.urn: StateEntry(c) for c in old})
    new = [c.goal(state.resources[c.urn].command if c.urn in state.resources else None) for c in new]
    return old, new, plan(state, new)


def harness_actions(old_config: dict | None, new_config: dict, stack: str) -> dict[str, str]:
    """The action per command name the imitation plans for going from `old_config` (applied)
    to `new_config`."""
    old, new, actions = _planned(old_config, new_config, stack)
    names = {c.urn: c.name for c in old} | {c.urn: c.name for c in new}
    return {names[urn]: action for urn, action in actions.items()}


def harness_deletes_first(old_config: dict, new_config: dict, stack: str) -> set[str]:
    """The replaced commands whose old copy the imitation deletes before it creates the new
    one: those with delete_before_replace, and those replaced with one of them."""
    _, new, actions = _planned(old_config, new_config, stack)
    first: set[str] = set()
    for command in new:
        if actions[command.urn] == "replace" and command.delete_before_replace:
            first |= {command.urn} | _replaced_with(command.urn, new, actions)
    names = {c.urn: c.name for c in new}
    return {names[urn] for urn in first}
