"""The project's architecture, stated here and checked on the source text of every module.

- No import cycle among the project's modules (``minipaged``, ``cuda_kernels``, ``tui``),
  counting imports inside functions too: a deferred import hides a cycle, it does not break it.
  Only imports under ``if TYPE_CHECKING:``, which never run, are left out.
- The paging modules (allocator, block tables, block managers, prefix caches, events,
  invariants) import no torch, directly or through another project module: they hold ints. So
  do the value types and their readers (``outputs``, ``block_state``, ``trace``, ``stats``)
  and the settings (``config``, ``arguments``): a trace loads, and a flag parses, without torch.
- ``minipaged.backend`` is the only project module that imports ``cuda_kernels``, so the
  reference (``attention``, ``kv_cache``) that every kernel is tested against imports none.
- ``minipaged.contract``, the checks the reference and the kernels share, imports no other
  project module.
- Dependencies point one way: ``minipaged`` does not import ``tui`` (the command line, which
  starts ``minipaged tui``, and the benchmark of the TUI's step are named exceptions). The
  grader owns running a student's code, the TUI only replays it: ``tui`` reaches the grader
  through one entry point, ``minipaged.grader.student_run``, and nothing else of it.
- One ``EngineConfig`` (``minipaged.config``) holds the engine's settings: ``LLM``,
  ``LLMEngine``, the TUI's scenarios and both command lines build from it, none of them spells
  a setting out again, and the command lines' engine flags are generated from its fields.
- The core block manager always records its events and reads as the source text: no
  ``record_events`` switch, no fast path on the pool's type, no whole-table refcount calls
  (the simulator's shortcuts live in ``minipaged.study.fast_manager``).
- No module is over 400 lines.

Imports are read with ``ast``, not by importing: nothing here loads torch or numba.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("minipaged", "cuda_kernels", "tui")
PAGING = [
    "minipaged.allocator",
    "minipaged.block_table",
    "minipaged.block_manager",
    "minipaged.study.fast_manager",
    "minipaged.prefix_cache",
    "minipaged.radix_cache",
    "minipaged.events",
    "minipaged.invariants",
]
MAX_LINES = 400


def module_files(root: Path) -> dict[str, Path]:
    """Every module of the project's packages under ``root``, by dotted name."""
    modules = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join(parts)] = path
    return modules


def imported_names(path: Path, module: str, modules: dict[str, Path]) -> set[str]:
    """Every dotted name ``module`` imports when it runs, at the top or inside functions.
    ``from a.b import c`` yields ``a.b.c`` when that is a module of the project, else ``a.b``;
    a parent package that Python runs on the way is not counted. Imports under
    ``if TYPE_CHECKING:`` never run (they let an annotation name a class) and are skipped."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and ast.unparse(node.test).endswith("TYPE_CHECKING"):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from .x import y, from .. import z
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                names.add(submodule if submodule in modules else base)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text(), str(path)))
    return names


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """Project module -> the project modules it imports (a package's ``__init__`` counts as the
    package's name)."""
    files = module_files(root)
    graph = {}
    for module, path in files.items():
        names = imported_names(path, module, files)
        graph[module] = {name for name in names if name in files and name != module}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan's algorithm):
    every module of one can reach every other, so each holds at least one cycle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = {start}, [start]
    while todo:
        for target in graph[todo.pop()] - seen:
            seen.add(target)
            todo.append(target)
    return seen


def imports_torch(module: str) -> bool:
    names = imported_names(FILES[module], module, FILES)
    return any(name == "torch" or name.startswith("torch.") for name in names)


FILES = module_files(ROOT)
GRAPH = import_graph()


def test_no_import_cycles_among_project_modules():
    found = cycles(GRAPH)
    assert not found, "import cycles (each list imports itself around): " + "; ".join(
        " <-> ".join(component) for component in found
    )


TORCH_FREE = [
    *PAGING,
    "minipaged.outputs",
    "minipaged.block_state",
    "minipaged.trace",
    "minipaged.stats",
    "minipaged.config",
    "minipaged.arguments",
]


@pytest.mark.parametrize("module", TORCH_FREE)
def test_paging_modules_import_no_torch_even_through_other_modules(module):
    offenders = sorted(m for m in reachable(GRAPH, module) if imports_torch(m))
    assert not offenders, f"{module} reaches torch through {offenders}"


def test_only_the_backend_module_imports_cuda_kernels():
    # The grader is exempt: exercise 7 times a student's CUDA kernel against cuda_kernels' own,
    # which is a comparison of two kernels, not a choice between the reference and a kernel.
    importers = sorted(
        module
        for module, targets in GRAPH.items()
        if not module.startswith(("cuda_kernels", "minipaged.grader"))
        and any(target.startswith("cuda_kernels") for target in targets)
    )
    assert importers == ["minipaged.backend"]


@pytest.mark.parametrize("module", ["minipaged.attention", "minipaged.kv_cache"])
def test_the_reference_reaches_no_kernel(module):
    kernels = sorted(m for m in reachable(GRAPH, module) if m.startswith("cuda_kernels"))
    assert not kernels, f"{module} reaches {kernels}"


def test_the_shared_checks_import_no_project_module():
    assert GRAPH["minipaged.contract"] == set()


def test_no_module_is_over_400_lines():
    sizes = {module: len(path.read_text().splitlines()) for module, path in FILES.items()}
    too_long = {module: lines for module, lines in sizes.items() if lines > MAX_LINES}
    assert not too_long, f"modules over {MAX_LINES} lines: {too_long}"


TUI_IMPORTERS = {
    "minipaged.cli": "runs `minipaged tui`, as it runs every subcommand",
    "minipaged.study.bench.tui": "the benchmark of the TUI's own step time",
}


def test_minipaged_imports_no_tui_but_where_named():
    importers = {
        module
        for module, targets in GRAPH.items()
        if module.startswith("minipaged") and any(t.split(".")[0] == "tui" for t in targets)
    }
    assert importers <= set(TUI_IMPORTERS), sorted(importers - set(TUI_IMPORTERS))


GRADER_ENTRY = "minipaged.grader.student_run"


def test_the_tui_reaches_the_grader_only_through_its_entry_point():
    reached = {
        (module, target)
        for module, targets in GRAPH.items()
        if module.split(".")[0] == "tui"
        for target in targets
        if target.startswith("minipaged.grader") and target != GRADER_ENTRY
    }
    assert reached == set(), sorted(reached)
    assert any(GRADER_ENTRY in targets for module, targets in GRAPH.items() if "tui" in module)


def test_the_grader_imports_no_tui():
    reached = {
        module
        for module, targets in GRAPH.items()
        if module.startswith("minipaged.grader") and any(t.split(".")[0] == "tui" for t in targets)
    }
    assert reached == set(), sorted(reached)


def source_tree(module: str) -> ast.Module:
    return ast.parse(FILES[module].read_text(), str(FILES[module]))


SETTINGS = {  # EngineConfig's fields, read from its source (no import: it is a test of text)
    node.target.id
    for config in ast.walk(source_tree("minipaged.config"))
    if isinstance(config, ast.ClassDef) and config.name == "EngineConfig"
    for node in config.body
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
}


def test_the_settings_are_read_from_the_config_source():
    assert {"block_size", "num_gpu_blocks", "num_cpu_blocks", "preemption"} <= SETTINGS


@pytest.mark.parametrize(
    ("module", "owner"),
    [("minipaged.llm", "LLM"), ("minipaged.engine", "LLMEngine"), ("tui.scenarios", "Scenario")],
)
def test_the_config_users_spell_no_setting_out_again(module, owner):
    """``LLM``, ``LLMEngine`` and ``Scenario`` take a config (and settings by name), never a
    parameter or field per setting: a new setting must not need a new line in each."""
    assert "minipaged.config" in GRAPH[module] or "tui.engine_config" in GRAPH[module]
    (cls,) = [
        node
        for node in ast.walk(source_tree(module))
        if isinstance(node, ast.ClassDef) and node.name == owner
    ]
    spelled = set()
    for node in ast.walk(cls):
        if isinstance(node, ast.FunctionDef) and node.name == "__init__":
            spelled |= {arg.arg for arg in node.args.args + node.args.kwonlyargs}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            spelled.add(node.target.id)
    assert not spelled & (SETTINGS - {"model"}), sorted(spelled & SETTINGS)


@pytest.mark.parametrize(
    "modules",
    [["minipaged.cli"], ["tui.command", "tui.shown_run"]],  # the TUI reads its flags apart
    ids=["minipaged.cli", "tui.command"],
)
def test_the_command_lines_generate_their_engine_flags(modules):
    trees = [source_tree(module) for module in modules]
    calls = {
        node.func.id
        for tree in trees
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
    }
    assert {"add_config_flags", "config_from_flags"} <= calls
    module = " and ".join(modules)
    by_hand = {
        node.value
        for tree in trees
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    } & {f"--{name.replace('_', '-')}" for name in SETTINGS}
    assert not by_hand, f"{module} writes engine flags by hand: {sorted(by_hand)}"


@pytest.mark.parametrize("module", ["minipaged.block_manager", "minipaged.allocator"])
def test_the_core_block_manager_has_no_simulator_shortcut(module):
    text = FILES[module].read_text()
    for shortcut in ("record_events", "recording", "incref_all", "decref_all", "type(pool)"):
        assert shortcut not in text, f"{module} still holds {shortcut!r}"


def write_package(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_a_cycle_through_a_deferred_import_is_found(tmp_path):
    write_package(
        tmp_path,
        {
            "minipaged/__init__.py": "",
            "minipaged/a.py": "from minipaged.b import f\n",
            "minipaged/b.py": "def f():\n    from minipaged import a\n    return a\n",
            "minipaged/c.py": "from . import a\n",
            "minipaged/d.py": "if TYPE_CHECKING:\n    import minipaged.c\n",
            "cuda_kernels/__init__.py": "",
            "tui/__init__.py": "",
        },
    )
    graph = import_graph(tmp_path)
    assert graph["minipaged.c"] == {"minipaged.a"}
    assert graph["minipaged.d"] == set()
    assert cycles(graph) == [["minipaged.a", "minipaged.b"]]
