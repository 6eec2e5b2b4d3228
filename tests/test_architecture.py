"""The import graph, read from the source with ``ast`` (every import counts: at module level,
inside functions, under ``TYPE_CHECKING``, and ``importlib.import_module("...")`` with a
literal name).

Data flows one way: scenario -> workload, engines, cluster -> records -> metrics -> plan ->
report and cli. The simulation layers never import what sits above them, the package's
top-level parts import each other without cycles, and so do the modules inside each part.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "clustersim"

SIMULATION = ("clustersim.engine", "clustersim.cost", "clustersim.cluster",
              "clustersim.workload", "clustersim.metrics", "clustersim.sim")
"""The layers that run a simulation and measure it."""
ABOVE_SIMULATION = ("clustersim.plan", "clustersim.report", "clustersim.cli", "matplotlib",
                    "jinja2", "ray")
"""What the simulation layers must not import: the planner, the report, the command line,
and the plotting, template and cluster libraries only those use."""

SCHEMA = "clustersim.scenario"
"""The scenario schema, every section in one package: read by the layers above and below."""


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def statements(path: Path, root: Path = ROOT) -> list[tuple[str, int, list[str]]]:
    """(module, line, names) for every import in the file: ``import a.b`` and
    ``importlib.import_module("a.b")`` give ``("a.b", line, [])``, ``from a.b import c, d``
    gives ``("a.b", line, ["c", "d"])``; relative imports are made absolute."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    module = module_name(path, root)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: list[tuple[str, int, list[str]]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno, []) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parents = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parents, *([node.module] if node.module else [])])
            found.append((base, node.lineno, [alias.name for alias in node.names]))
        elif (isinstance(node, ast.Call) and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)
              and ((isinstance(node.func, ast.Attribute) and node.func.attr == "import_module")
                   or (isinstance(node.func, ast.Name)
                       and node.func.id in ("import_module", "__import__")))):
            found.append((node.args[0].value, node.lineno, []))
    return found


def imports(path: Path, root: Path = ROOT) -> list[tuple[str, int]]:
    """(imported name, line) for every import in the file. ``from a.b import c`` gives
    ``a.b`` and ``a.b.c`` (``c`` may be a module)."""
    return [(f"{base}.{name}" if name else base, line)
            for base, line, names in statements(path, root) for name in ["", *names]]


def sources() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def _within(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def test_the_simulation_layers_import_nothing_above_them():
    offenders = [
        f"{path.relative_to(ROOT)}:{line} imports {name}"
        for path in sources() if _within(module_name(path), SIMULATION)
        for name, line in imports(path) if _within(name, ABOVE_SIMULATION)
    ]
    assert offenders == [], "\n".join(offenders)


def test_the_import_reader_sees_every_form_of_import(tmp_path):
    """The reader is what the tests above and below trust: a function-level import, one under
    TYPE_CHECKING, a relative one and importlib's all count."""
    package = tmp_path / "clustersim" / "engine"
    package.mkdir(parents=True)
    file = package / "x.py"
    file.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from clustersim.plan import spec\n"
        "def f():\n    import matplotlib.pyplot\n    from ..report import figures\n"
        "    import importlib\n    importlib.import_module('ray')\n")
    names = {name for name, _ in imports(file, tmp_path)}
    assert {"clustersim.plan", "matplotlib.pyplot", "clustersim.report.figures",
            "ray"} <= names


def _part(name: str) -> str | None:
    """The top-level part of clustersim a module name lies in: a subpackage (``cluster``)
    or a top-level module (``scenario``); None outside clustersim or for the package itself."""
    parts = name.split(".")
    if parts[0] != "clustersim" or len(parts) < 2:
        return None
    head = parts[1]
    is_part = (PACKAGE / head).is_dir() or (PACKAGE / f"{head}.py").is_file()
    return head if is_part else None


def _graph() -> tuple[nx.DiGraph, dict[tuple[str, str], list[str]]]:
    """Arrows between clustersim's top-level parts, each with where it is imported."""
    where: dict[tuple[str, str], list[str]] = defaultdict(list)
    for path in sources():
        source = _part(module_name(path))
        for name, line in imports(path):
            target = _part(name)
            if source is not None and target is not None and target != source:
                where[source, target].append(f"{path.relative_to(ROOT)}:{line}")
    graph = nx.DiGraph()
    graph.add_edges_from(where)
    return graph, where


def _cycle_message(graph: nx.DiGraph, where: dict[tuple[str, str], list[str]]) -> str:
    cycle = nx.find_cycle(graph)
    return "import cycle: " + "; ".join(f"{a} -> {b} ({', '.join(sorted(set(where[a, b]))[:3])})"
                                        for a, b in cycle)


def test_the_subpackages_import_each_other_without_cycles():
    graph, where = _graph()
    packages = graph.subgraph([n for n in graph if (PACKAGE / n).is_dir()])
    assert nx.is_directed_acyclic_graph(packages), _cycle_message(packages, where)


def test_no_import_cycle_between_top_level_parts():
    """Counting the top-level modules (sim.py, inputs.py, ...) as parts too: no cycle."""
    graph, where = _graph()
    assert nx.is_directed_acyclic_graph(graph), _cycle_message(graph, where)


def test_the_schema_imports_no_layer_that_reads_it():
    """The schema package sits below everything that reads a scenario: it imports neither the
    simulation layers that run one (only the engine's settings, the workload's spec and the
    catalog it names) nor the planner, the report or the command line."""
    readers = ("clustersim.cluster", "clustersim.plan", "clustersim.report", "clustersim.cli",
               "clustersim.metrics", "clustersim.sim")
    found = [f"{path.relative_to(ROOT)}:{line} imports {name}"
             for path in sources() if module_name(path).startswith(SCHEMA)
             for name, line in imports(path)
             if any(name == r or name.startswith(r + ".") for r in readers)]
    assert found == [], found


def _modules() -> dict[str, Path]:
    return {module_name(path): path for path in sources()}


def module_imports(path: Path, modules: dict[str, Path] | set[str],
                   root: Path = ROOT) -> list[tuple[str, int]]:
    """(module, line) for every import in the file, each resolved to the module of ``modules``
    it loads: ``from a.b import c`` is ``a.b.c`` where that is a module, else ``a.b`` (``c``
    is a name defined there); ``import a.b.c.d`` is the longest of its prefixes that is one.
    Names outside ``modules`` are left out."""
    found = []
    for name, line, names in statements(path, root):
        targets = [f"{name}.{n}" if f"{name}.{n}" in modules else name for n in names] or [name]
        for target in targets:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target:
                found.append((target, line))
    return found


def module_cycles(modules: dict[str, Path], root: Path = ROOT) -> list[str]:
    """One line per import cycle among modules of the same top-level part of the package
    (``clustersim.plan.result -> clustersim.plan.ledger -> clustersim.plan.result``), each
    arrow with the line it is imported at."""
    def part_of(module: str) -> str | None:
        """``plan`` for clustersim/plan/result.py and clustersim/plan/__init__.py; None for a
        top-level module (clustersim/sim.py), a part on its own."""
        folders = modules[module].relative_to(root).parts[1:-1]
        return folders[0] if folders else None

    graph = nx.DiGraph()
    where: dict[tuple[str, str], list[str]] = defaultdict(list)
    for source, path in modules.items():
        part = part_of(source)
        for target, line in module_imports(path, modules, root):
            if target != source and part is not None and part_of(target) == part:
                graph.add_edge(source, target)
                where[source, target].append(f"{path.relative_to(root)}:{line}")
    cycles = []
    for cycle in nx.simple_cycles(graph):
        first = cycle.index(min(cycle))  # (each cycle from its first module by name)
        cycle = cycle[first:] + cycle[:first]
        cycles.append("import cycle: " + " -> ".join(
            f"{a} ({where[a, b][0]})" for a, b in zip(cycle, [*cycle[1:], cycle[0]],
                                                      strict=True)) + f" -> {cycle[0]}")
    return sorted(cycles)


def test_the_modules_of_each_part_import_each_other_without_cycles():
    """Inside every part of the package (``plan/``, ``cluster/``, ``engine/`` with its
    subpackages, ...) the modules import each other one way. Every import counts, as in the
    tests above: one under ``if TYPE_CHECKING:`` is a type the module is written against, and
    a type checker follows it as Python follows the others; one inside a function is loaded
    later, but two modules that each need the other are one concept in two files whichever
    line loads them. The fix for a cycle is the type both need moved to the module where it
    belongs, never an import moved into a function or under ``TYPE_CHECKING`` to hide it.
    A package's ``__init__`` is a module like the others: a re-export it imports from a
    module that imports the package's names back is a cycle too."""
    assert module_cycles(_modules()) == []


def test_the_cycle_finder_sees_type_only_and_function_level_cycles(tmp_path):
    package = tmp_path / "clustersim" / "plan"
    package.mkdir(parents=True)
    for folder in (tmp_path / "clustersim", package):
        (folder / "__init__.py").write_text("")
    (package / "a.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from clustersim.plan.b "
        "import B\n")
    (package / "b.py").write_text("def f():\n    from clustersim.plan import c\n")
    (package / "c.py").write_text("import clustersim.plan.a.thing\n")
    (package / "d.py").write_text("from clustersim.plan import a, b\n")  # no cycle through d
    modules = {module_name(p, tmp_path): p for p in sorted(tmp_path.rglob("*.py"))}
    found = module_cycles(modules, tmp_path)
    assert len(found) == 1, found
    assert found[0].startswith("import cycle: clustersim.plan.a (clustersim/plan/a.py:3) -> "
                               "clustersim.plan.b (clustersim/plan/b.py:2) -> "
                               "clustersim.plan.c (clustersim/plan/c.py:1) -> clustersim.plan.a")
