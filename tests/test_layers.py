"""One way down: the import layers of components/ (docs/layout.md draws them).

    composition/  cluster.py, host_part.py,         the graph, the host state, the whole stack
                  cluster_parts.py, host_state.py,
                  stack_config.py
    composition/  config.py, cluster_host.py,       the composition: ClusterConfig, its hosts,
                  cluster_views.py, node_memory.py, its derived views (nodes' memory shares),
                  config_rules_beside_errors.py     its rule registry
    host/ network/ lxc/ slurm/ app/ metrics/        the areas: each imports its own config, the
    sharedfs/ burst/ aws/ kubernetes/               shared building blocks, and another area only
                                                    where ALLOWED lists the pair with its reason
    common/       config_types.py transport.py      the shared building blocks
                  options.py rendering.py script_store.py
                  registration.py

A module imports only its own layer or those below; no import runs back up, and no two
modules import each other, directly or around a loop. Every import counts, also one inside a
function. The failures name the file and line of each offending import.

Beside the layers, the sizes: no file of components/ over 500 lines, no function or method
(served scripts in files/ included) over 80, each failure naming file, function and length.
"""

import ast
from pathlib import Path

import pytest

from tests.harness.program_harness import ROOT

COMPONENTS = ROOT / "components"
AREAS = ("host", "network", "lxc", "slurm", "app", "metrics", "sharedfs", "burst", "aws", "kubernetes", "containers")
SHARED = ("config_types", "transport", "script_store", "options", "rendering", "registration")
COMPOSITION = ("config", "cluster_host", "cluster_views", "node_memory", "config_rules_beside_errors")
TOP = ("cluster", "host_part", "cluster_parts", "host_state", "stack_config")
LEVELS = {"shared": 0, "area": 1, "composition": 2, "top": 3}

# Area -> area imports that are real and one-way, each with its reason (docs/layout.md lists them).
ALLOWED = {
    ("app", "lxc"): "the web app runs in a CudaContainer (its ContainerSpec and platform)",
    ("app", "network"): "web_app.allowed_sources is a forward's source list: the same field description",
    ("aws", "network"): "rule_aws: an EC2 host's container subnets (network's) lie outside the VPC",
    ("aws", "sharedfs"): "EfsFileSystem builds the shared filesystem's `kind: efs` (EfsShare)",
    ("containers", "lxc"): "the stack's registry runs in a service container; its name avoids the program's containers",
    ("containers", "network"): "the stack's registry's container sits on the NAT bridge",
    ("burst", "aws"): "burst instances use the EC2 price table, instance-type pattern, AWS ids and site tags",
    ("burst", "network"): "rule_burst: burst subnets lie apart from every host's container subnets",
    ("host", "network"): "GpuHost's preflight checks the host's bridges; rule_hosts: hosts' subnets are disjoint",
    ("kubernetes", "host"): "the MNIST Job's scratch_host_path is refused inside the host paths' system trees",
    ("lxc", "host"): "the people (host's UserConfig) are created in every container",
    ("lxc", "network"): "a container's network lines come from its host's bridges (NetworkConfig)",
    ("metrics", "aws"): "an EC2 host's GPU-hour price comes from the instance's hourly price",
    ("metrics", "lxc"): "Prometheus runs in a CudaContainer",
    ("metrics", "network"): "rule_metrics_ports: the metrics ports are checked against Slurm's (SLURM_PORTS)",
    ("sharedfs", "host"): "shared_fs.directory is refused inside the host paths' system trees",
    ("slurm", "containers"): "slurm.conf names the containers' prolog; a node sets up its Enroot files and Pyxis",
    ("slurm", "burst"): "slurm.conf renders the burst partitions' cloud nodes and their programs' paths",
    ("slurm", "host"): "the accounting database's container gets the people (UserConfig)",
    ("slurm", "lxc"): "the accounting database runs in a container; Slurm names avoid the program's containers",
    ("slurm", "network"): "the accounting database's container sits on the NAT bridge",
}


def module_name(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")


def layer(module: str) -> tuple[str, str]:
    """(layer, area or module) of a components module: an unknown top-level module fails, so a
    new one is placed in a layer (here and in docs/layout.md) on purpose."""
    parts = module.split(".")
    if len(parts) == 1:
        return "top", "components"
    if parts[1] in AREAS:
        return "area", parts[1]
    # The shared building blocks in common/, the composition's two layers in composition/.
    folders = {"common": (("shared", SHARED),), "composition": (("composition", COMPOSITION), ("top", TOP))}
    if parts[1] in folders and len(parts) == 2:
        return folders[parts[1]][-1][0], parts[1]  # the package itself
    for name, members in folders.get(parts[1], ()):
        if parts[2] in members:
            return name, parts[2]
    raise AssertionError(f"components/{'/'.join(parts[1:])}.py is in no layer of tests/test_layers.py")


def imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every components import of a file, module-level or not; a name
    imported from a package counts as its module where one exists."""
    found = []
    package = module_name(path).split(".")[:-1] if path.name != "__init__.py" else module_name(path).split(".")
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join([*package[: len(package) - node.level + 1], *([base] if base else [])])
            found.append((node.lineno, base))
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                if (ROOT / Path(*candidate.split("."))).with_suffix(".py").is_file():
                    found.append((node.lineno, candidate))
    return [(line, name) for line, name in found if name == "components" or name.startswith("components.")]


def graph() -> dict[str, list[tuple[str, int, str]]]:
    """Module -> (file, line, imported module) of each components import."""
    edges = {}
    for path in sorted(COMPONENTS.rglob("*.py")):
        file = str(path.relative_to(ROOT))
        edges[module_name(path)] = [(file, line, name) for line, name in imports(path)]
    return edges


def test_every_module_of_components_is_in_a_layer():
    for module in graph():
        layer(module)


def upward(edges: dict[str, list[tuple[str, int, str]]]) -> list[str]:
    """Imports of an area module from the composition or above, or from another area outside
    ALLOWED, and any import of a higher layer, each with its file and line."""
    wrong = []
    for module, imported in edges.items():
        kind, here = layer(module)
        for file, line, name in imported:
            other_kind, there = layer(name)
            if kind == "area" and other_kind in ("composition", "top"):
                wrong.append(f"{file}:{line}: {name} (an area takes its slice or view of the cluster from cluster.py)")
            elif kind == "area" and other_kind == "area" and here != there and (here, there) not in ALLOWED:
                wrong.append(f"{file}:{line}: {name} ({here} -> {there} is not in ALLOWED nor docs/layout.md)")
            elif LEVELS[other_kind] > LEVELS[kind]:
                wrong.append(f"{file}:{line}: {name} ({kind} imports {other_kind})")
    return wrong


def test_no_import_runs_back_up():
    wrong = upward(graph())
    assert not wrong, "\n".join(wrong)


def cycles(edges: dict[str, list[tuple[str, int, str]]]) -> list[str]:
    """Import cycles, each as the chain of imports (file:line) that closes it."""
    found, keys, state, stack = [], set(), {}, []

    def visit(module: str) -> None:
        state[module] = "open"
        for file, line, name in edges.get(module, []):
            if name not in edges:
                continue
            if state.get(name) == "open":
                start = next((i for i, edge in enumerate(stack) if edge[0] == name), len(stack))
                loop = [*stack[start:], (module, file, line, name)]
                key = frozenset(edge[0] for edge in loop)
                if key not in keys:
                    keys.add(key)
                    found.append(" -> ".join(f"{f}:{n} imports {target}" for _, f, n, target in loop))
            elif name not in state:
                stack.append((module, file, line, name))
                visit(name)
                stack.pop()
        state[module] = "done"

    for module in sorted(edges):
        if module not in state:
            visit(module)
    return found


def test_no_import_cycle():
    found = cycles(graph())
    assert not found, "\n".join(found)


def area_graph() -> dict[str, set[str]]:
    areas: dict[str, set[str]] = {}
    for module, edges in graph().items():
        kind, area = layer(module)
        if kind == "area":
            for _, _, name in edges:
                other_kind, other = layer(name)
                if other_kind == "area" and other != area:
                    areas.setdefault(area, set()).add(other)
    return areas


def test_the_allowed_area_imports_are_used_and_form_no_cycle():
    used = {(a, b) for a, others in area_graph().items() for b in others}
    assert set(ALLOWED) == used, (sorted(set(ALLOWED) - used), sorted(used - set(ALLOWED)))
    order = {area: {area} for area in AREAS}
    for _ in AREAS:
        for a, b in ALLOWED:
            order[a] |= order[b]
    assert not [(a, b) for a, b in ALLOWED if a in order[b]], "the allowed area imports run in a circle"


def test_docs_list_the_allowed_area_imports():
    text = (ROOT / "docs" / "layout.md").read_text()
    missing = [f"{a} -> {b}" for a, b in ALLOWED if f"{a}/ -> {b}/" not in text]
    assert not missing, missing


MAX_LINES = 500


def test_no_file_of_components_is_over_500_lines():
    """A file a reader can hold: a longer one is split by concern (as config.py, cluster.py,
    kubernetes/config.py and the web app were)."""
    long = {
        str(path.relative_to(ROOT)): lines
        for path in sorted(COMPONENTS.rglob("*"))
        if path.is_file() and "__pycache__" not in path.parts
        for lines in [len(path.read_bytes().splitlines())]
        if lines > MAX_LINES
    }
    assert not long, long


MAX_FUNCTION_LINES = 80
# None: every function of components/ is short (the cluster's composition too, in named stages).
LONG_FUNCTIONS_ALLOWED: set[tuple[str, str]] = set()


def function_lengths(path: Path) -> dict[str, int]:
    """Qualified name -> lines (the def line to the last, docstring and comments included) of
    every function and method in a file, nested ones too."""
    lengths = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    lengths[name] = child.end_lineno - child.lineno + 1
                visit(child, f"{name}.")
            else:
                visit(child, prefix)

    visit(ast.parse(path.read_text(), str(path)), "")
    return lengths


def long_functions(root: Path) -> dict[tuple[str, str], int]:
    """(file, function) -> lines of each function of components/ (served scripts in files/
    too) over MAX_FUNCTION_LINES."""
    return {
        (str(path.relative_to(root)), name): lines
        for path in sorted((root / "components").rglob("*.py"))
        for name, lines in function_lengths(path).items()
        if lines > MAX_FUNCTION_LINES
    }


def test_no_function_of_components_is_over_80_lines():
    """A function says what it does in a screen: a longer one is split into named stages (a
    component's __init__ calling self._network(), self._vpn(), ...)."""
    long = long_functions(ROOT)
    over = [
        f"{file}: {name} is {lines} lines"
        for (file, name), lines in long.items()
        if (file, name) not in LONG_FUNCTIONS_ALLOWED
    ]
    assert not over, f"over {MAX_FUNCTION_LINES} lines:\n" + "\n".join(over)
    stale = sorted(LONG_FUNCTIONS_ALLOWED - set(long))
    assert not stale, f"short now: remove from LONG_FUNCTIONS_ALLOWED: {stale}"


# ---- the checks themselves fail on what they are meant to catch ----


def fake_tree(tmp_path: Path, files: dict[str, str]) -> dict[str, list[tuple[str, int, str]]]:
    edges = {}
    for relative, text in files.items():
        path = tmp_path / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for relative in files:
        path = tmp_path / relative
        module = ".".join(Path(relative).with_suffix("").parts)
        edges[module] = [
            (relative, node.lineno, node.module)
            for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.ImportFrom) and node.module.startswith("components")
        ]
    return edges


def test_a_cycle_is_named_with_files_and_lines(tmp_path):
    edges = fake_tree(
        tmp_path,
        {
            "components/slurm/a.py": "import os\nfrom components.lxc.b import x\n",
            "components/lxc/b.py": "from components.slurm.a import y\n",
        },
    )
    assert cycles(edges) == [
        "components/lxc/b.py:1 imports components.slurm.a -> components/slurm/a.py:2 imports components.lxc.b"
    ]


@pytest.mark.parametrize(
    ("module", "expected"),
    [
        ("components.composition.config", ("composition", "config")),
        ("components.slurm.slurm_conf", ("area", "slurm")),
        ("components.common.transport", ("shared", "transport")),
        ("components.composition.cluster", ("top", "cluster")),
    ],
)
def test_modules_are_placed_in_their_layer(module, expected):
    assert layer(module) == expected


def test_an_area_importing_the_composition_or_an_unlisted_area_is_named(tmp_path):
    edges = fake_tree(
        tmp_path,
        {
            "components/network/a.py": "from components.composition.config import ClusterConfig\n",
            "components/network/b.py": "\nfrom components.slurm.config import NodeConfig\n",
            "components/common/transport.py": "from components.lxc.config import GpuConfig\n",
            "components/lxc/c.py": "from components.network.config import NetworkConfig\n",
        },
    )
    assert upward(edges) == [
        "components/network/a.py:1: components.composition.config "
        "(an area takes its slice or view of the cluster from cluster.py)",
        "components/network/b.py:2: components.slurm.config (network -> slurm is not in ALLOWED nor docs/layout.md)",
        "components/common/transport.py:1: components.lxc.config (shared imports area)",
    ]


def test_a_long_function_is_named_with_its_file_and_length(tmp_path):
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES))
    (tmp_path / "components" / "area" / "files").mkdir(parents=True)
    (tmp_path / "components" / "area" / "files" / "served.py").write_text(
        f"def short():\n    pass\n\n\ndef long():\n{body}"
    )
    (tmp_path / "components" / "area" / "part.py").write_text(
        f"class Part:\n    def __init__(self):\n{''.join('    ' + line for line in body.splitlines(True))}"
    )
    assert long_functions(tmp_path) == {
        ("components/area/files/served.py", "long"): MAX_FUNCTION_LINES + 1,
        ("components/area/part.py", "Part.__init__"): MAX_FUNCTION_LINES + 1,
    }
