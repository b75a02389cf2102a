"""The layout the README describes: folders follow type tokens, one transport module creates
host commands, and components receive the slice of config they model."""

import ast
import importlib
import inspect
import re

import pulumi
import pytest

from components.composition.config import ClusterConfig
from tests.harness.program_harness import ROOT, run_program, stack_config

COMPONENTS = ROOT / "components"
TOKEN = re.compile(r'super\(\).__init__\(\s*"gpu-cluster:(\w+):(\w+)"')


def modules() -> list[str]:
    return sorted(
        ".".join(path.relative_to(ROOT).with_suffix("").parts)
        for path in COMPONENTS.rglob("*.py")
        if "files" not in path.parts and path.name != "__init__.py"
    )


def tokens() -> dict[str, str]:
    """Type token of every component -> the module file that registers it."""
    found = {}
    for path in COMPONENTS.rglob("*.py"):
        for module, type_ in TOKEN.findall(path.read_text()):
            found[f"gpu-cluster:{module}:{type_}"] = str(path.relative_to(COMPONENTS))
    return found


def test_a_type_token_names_the_folder_of_its_module():
    for token, path in tokens().items():
        module = token.split(":")[1]
        # The composition's own components (GpuCluster, HostPart) are in composition/: their
        # tokens were there before the folder and stay (a token is part of every URN below it).
        folder = "composition" if module == "cluster" else module
        assert path.startswith(f"{folder}/"), (token, path)


@pytest.mark.parametrize("stack", ["e2e", "k8s"])
def test_every_registered_component_type_is_found_by_its_token(stack):
    registered = {r.type for r in run_program(stack_config(stack), stack=stack).resources if not r.custom}
    assert registered <= set(tokens()), registered - set(tokens())


def test_only_transport_creates_host_commands():
    users = sorted(
        str(path.relative_to(ROOT)) for path in COMPONENTS.rglob("*.py") if "pulumi_command" in path.read_text()
    )
    assert users == ["components/common/transport.py"]


def test_components_receive_a_slice_of_the_cluster_config():
    takers = []
    for name in modules():
        for _, cls in inspect.getmembers(importlib.import_module(name), inspect.isclass):
            if issubclass(cls, pulumi.ComponentResource) and cls.__module__ == name:
                annotations = [p.annotation for p in inspect.signature(cls.__init__).parameters.values()]
                if ClusterConfig in annotations or "ClusterConfig" in annotations:
                    takers.append(cls.__name__)
    # The composition: the cluster, and each host's part of it.
    assert takers == ["GpuCluster", "HostPart"]


def area_imports() -> dict[str, set[str]]:
    """Each component area (a folder of components/) -> the other areas its modules import."""
    edges: dict[str, set[str]] = {}
    for path in COMPONENTS.glob("*/*.py"):
        if "files" in path.parts:
            continue
        area = path.parent.name
        imported = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                imported.add(node.module)
            elif isinstance(node, ast.Import):
                imported.update(alias.name for alias in node.names)
        edges.setdefault(area, set()).update(
            parts[1] for parts in (name.split(".") for name in imported) if len(parts) > 2 and parts[0] == "components"
        )
        edges[area].discard(area)
    return edges


def test_lxc_and_slurm_do_not_import_each_other():
    edges = area_imports()
    assert "slurm" not in edges["lxc"], "components/lxc imports components/slurm"
    assert not ("lxc" in edges["slurm"] and "slurm" in edges["lxc"])


def test_component_areas_import_each_other_one_way():
    """No cycle between areas: what two areas share lives in a module outside both."""
    edges = area_imports()
    cycles = []

    def visit(area: str, path: list[str]) -> None:
        for other in sorted(edges.get(area, ())):
            if other in path:
                cycles.append(" -> ".join([*path[path.index(other) :], other]))
            else:
                visit(other, [*path, other])

    for area in sorted(edges):
        visit(area, [area])
    assert not cycles, cycles


def test_config_models_are_imported_from_the_module_that_defines_them():
    """components/composition/config.py composes the areas' models; a model is imported from its own area."""
    tree = ast.parse((COMPONENTS / "composition" / "config.py").read_text())
    defined = {node.name for node in tree.body if isinstance(node, (ast.ClassDef, ast.FunctionDef))}
    defined |= {t.id for node in tree.body if isinstance(node, ast.Assign) for t in node.targets if hasattr(t, "id")}
    wrong = []
    for path in [
        *ROOT.glob("*.py"),
        *(p for d in ("components", "tests", "review", "tools") for p in ROOT.glob(f"{d}/**/*.py")),
    ]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module == "components.composition.config":
                wrong += [f"{path.relative_to(ROOT)}: {a.name}" for a in node.names if a.name not in defined]
    assert not wrong, wrong
