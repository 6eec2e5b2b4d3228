"""The coalesced decode fast-forward lives in one package (``clustersim.engine.fastforward``)
and is reached through one narrow door per caller: a change to when a run is exact is made
there and nowhere else."""

from __future__ import annotations

from test_architecture import PACKAGE, imports, module_name, sources

FASTFORWARD = "clustersim.engine.fastforward"

DOORS = {
    "clustersim.engine.instance": {"clustersim.engine.fastforward.engine"},
    "clustersim.engine.data_parallel": {"clustersim.engine.fastforward.lockstep"},
    "clustersim.engine.scheduler": {"clustersim.engine.fastforward.decode_set"},
    # the pricers write a run's step ends as the run's timer adds them
    "clustersim.cluster.build": {"clustersim.engine.fastforward.timer"},
}
"""The modules outside the package that import it, and the one module each may import."""


def _fastforward_imports(path) -> set[str]:
    """The fast-forward modules ``path`` imports (names inside them folded to the module)."""
    found = set()
    for name, _line in imports(path):
        if name == FASTFORWARD or name.startswith(FASTFORWARD + "."):
            parts = name.split(".")
            found.add(".".join(parts[:4]))
    return found


def test_only_the_known_callers_reach_the_fast_forward_each_through_its_door():
    reached = {}
    for path in sources():
        module = module_name(path)
        if module == FASTFORWARD or module.startswith(FASTFORWARD + "."):
            continue
        used = _fastforward_imports(path)
        if used:
            reached[module] = used
    assert reached == DOORS


def test_the_package_init_imports_nothing():
    """The scheduler imports the decode set: the package's ``__init__`` must import nothing
    (no cycle back through the scheduler)."""
    init = PACKAGE / "engine" / "fastforward" / "__init__.py"
    assert [name for name, _ in imports(init) if not name.startswith("__future__")] == []
