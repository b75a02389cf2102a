"""The upgrade plan (tests/harness/plan.py) decides as the engine does: same, update, replace,
create, delete; aliases recorded from a real mocked program keep a moved resource."""

import copy
import textwrap

from tests.harness.plan import plan, records, summary
from tests.harness.program_harness import run_program

COMMAND = "command:local:Command"
STACK_URN = "urn:pulumi:s::p::"


def resource(name, *, type_=COMMAND, parent="", custom=True, aliases=(), **inputs) -> dict:
    chain = f"{parent.split('::')[2]}$" if parent else ""
    return {
        "urn": f"{STACK_URN}{chain}{type_}::{name}",
        "type": type_,
        "name": name,
        "parent": parent,
        "custom": custom,
        "delete_before_replace": False,
        "inputs": inputs,
        "aliases": list(aliases),
    }


def actions(old, new) -> dict[str, str]:
    return {step.urn.rsplit("::", 1)[1]: step.action for step in plan(old, new)}


def graph() -> list[dict]:
    box = resource("box", type_="t:m:Box", custom=False)
    return [
        box,
        resource("a", parent=box["urn"], create="x", environment={"K": "1"}, triggers=["1"]),
        resource("b", parent=box["urn"], create="y", environment={}),
    ]


def test_the_same_graph_is_all_same():
    assert set(actions(graph(), graph()).values()) == {"same"}


def test_a_changed_input_updates_and_a_changed_trigger_replaces():
    new = graph()
    new[1]["inputs"]["environment"] = {"K": "2"}
    new[2]["inputs"]["create"] = "z"
    assert actions(graph(), new) == {"box": "same", "a": "update", "b": "update"}
    new[1]["inputs"]["triggers"] = ["2"]
    assert actions(graph(), new)["a"] == "replace"
    assert [step.changed for step in plan(graph(), new) if step.action == "replace"] == [("triggers",)]


def test_new_is_created_and_gone_is_deleted():
    new = [*graph()[:2], resource("c", parent=graph()[0]["urn"], create="y")]
    assert actions(graph(), new) == {"box": "same", "a": "same", "c": "create", "b": "delete"}
    assert summary(plan(graph(), new)) == {"same": 2, "update": 0, "replace": 0, "create": 1, "delete": 1}


def test_a_new_parent_without_alias_replaces():
    other = resource("other", type_="t:m:Box", custom=False)
    new = [*graph(), other]
    new[2] = {**new[2], "parent": other["urn"]}  # same parent type: the URN does not change
    assert actions(graph(), new)["b"] == "replace"


def test_a_renamed_kubernetes_object_is_replaced():
    old = [resource("d", type_="kubernetes:apps/v1:Deployment", metadata={"name": "web"}, spec={})]
    new = copy.deepcopy(old)
    new[0]["inputs"]["spec"] = {"replicas": 2}
    assert actions(old, new) == {"d": "update"}
    new[0]["inputs"]["metadata"] = {"name": "web2"}
    assert actions(old, new) == {"d": "replace"}


PROGRAM = textwrap.dedent(
    """
    import pulumi
    from pulumi_command import local

    variant = pulumi.Config("gpu-cluster").require_object("variant")


    class Box(pulumi.ComponentResource):
        def __init__(self, name, type_, opts=None):
            super().__init__(type_, name, None, opts)
            local.Command(f"{name}-cmd", create="true", opts=pulumi.ResourceOptions(parent=self))
            self.register_outputs({})


    class Part(pulumi.ComponentResource):
        def __init__(self, name):
            super().__init__("test:new:Part", name, None)


    if variant == "old":
        Box("box", "test:old:Box")
    elif variant == "moved":
        Box("box", "test:new:Box")
    elif variant == "aliased":
        Box("box", "test:new:Box", opts=pulumi.ResourceOptions(aliases=[pulumi.Alias(type_="test:old:Box")]))
    elif variant == "renamed":
        Box("crate", "test:old:Box", opts=pulumi.ResourceOptions(aliases=[pulumi.Alias(name="box")]))
    else:  # a new component between: the box now below a Part (aliased to its old parent, the stack)
        part = Part("part")
        alias = [pulumi.Alias(parent=pulumi.ROOT_STACK_RESOURCE)] if variant == "parted-aliased" else []
        Box("box", "test:old:Box", opts=pulumi.ResourceOptions(parent=part, aliases=alias))
    """
)


def test_aliases_recorded_from_the_sdk_keep_a_moved_component_and_its_children(tmp_path):
    main = tmp_path / "main.py"
    main.write_text(PROGRAM)
    old = records(run_program({"variant": "old"}, stack="s", main=main))
    moved = records(run_program({"variant": "moved"}, stack="s", main=main))
    aliased = records(run_program({"variant": "aliased"}, stack="s", main=main))

    assert summary(plan(old, moved)) == {"same": 0, "update": 0, "replace": 0, "create": 2, "delete": 2}
    assert summary(plan(old, aliased)) == {"same": 2, "update": 0, "replace": 0, "create": 0, "delete": 0}
    assert {step.urn: step.old_urn for step in plan(old, aliased)} == {
        new["urn"]: previous["urn"] for new, previous in zip(aliased, old, strict=True)
    }


def test_a_child_inherits_its_parents_alias_under_the_parents_old_name(tmp_path):
    # The engine's rule: a child whose name starts with its parent's name is looked for under
    # the parent's old URN with the parent's old name as its prefix ("crate-cmd" was "box-cmd").
    main = tmp_path / "main.py"
    main.write_text(PROGRAM)
    old = records(run_program({"variant": "old"}, stack="s", main=main))
    renamed = records(run_program({"variant": "renamed"}, stack="s", main=main))
    assert summary(plan(old, renamed)) == {"same": 2, "update": 0, "replace": 0, "create": 0, "delete": 0}


def test_a_component_put_between_keeps_what_moved_below_it_only_through_an_alias(tmp_path):
    main = tmp_path / "main.py"
    main.write_text(PROGRAM)
    old = records(run_program({"variant": "old"}, stack="s", main=main))
    parted = records(run_program({"variant": "parted"}, stack="s", main=main))
    aliased = records(run_program({"variant": "parted-aliased"}, stack="s", main=main))

    assert summary(plan(old, aliased)) == {"same": 2, "update": 0, "replace": 0, "create": 1, "delete": 0}
    assert [step.urn.rsplit("::", 1)[1] for step in plan(old, aliased) if step.action == "create"] == ["part"]
    assert summary(plan(old, parted))["same"] == 0, "without the alias the box and its command are made anew"
