"""A peer's reading of DESIGN.md's repository layout and dependency rules.

Written from the shared design alone (its "Repository layout" table and the paragraph on
dependencies), the way another team would test its own build of the same design: the three
import packages and the console script exist, the modules the design names import, the
paging modules import no torch, the reference imports no kernel, one backend module is the
only importer of ``cuda_kernels``, and no module is over 400 lines or named for a layer.
"""

from __future__ import annotations

import ast
import importlib
import importlib.metadata
import pkgutil
from pathlib import Path

import pytest

PACKAGES = ("minipaged", "cuda_kernels", "tui")

# The concepts DESIGN.md's layout table lists for minipaged/, by the module names the design
# and the README give them.
DESIGNED_MODULES = (
    "minipaged.memory",
    "minipaged.allocator",
    "minipaged.block_table",
    "minipaged.block_manager",
    "minipaged.prefix_cache",
    "minipaged.radix_cache",
    "minipaged.kv_cache",
    "minipaged.attention",
    "minipaged.model",
    "minipaged.checkpoint",
    "minipaged.tokenizer",
    "minipaged.sampling",
    "minipaged.beam_search",
    "minipaged.scheduler",
    "minipaged.engine",
    "minipaged.llm",
    "minipaged.events",
    "minipaged.trace",
    "minipaged.invariants",
    "minipaged.config",
    "minipaged.backend",
    "minipaged.cli",
    "minipaged.study.baselines",
    "minipaged.study.simulator",
    "minipaged.study.bench",
    "minipaged.grader",
    "cuda_kernels",
    "cuda_kernels.cpu",
    "tui",
)

# "the paging modules (allocator, block table, block manager, prefix caches, events,
# invariants) import no torch"
PAGING_MODULES = (
    "minipaged.allocator",
    "minipaged.block_table",
    "minipaged.block_manager",
    "minipaged.prefix_cache",
    "minipaged.radix_cache",
    "minipaged.events",
    "minipaged.invariants",
)

LAYER_NAMES = {"utils", "helpers", "base", "common", "manager2", "misc"}


def package_files(package: str) -> list[Path]:
    root = Path(importlib.import_module(package).__file__).parent
    return sorted(root.rglob("*.py"))


def module_file(name: str) -> Path:
    return Path(importlib.util.find_spec(name).origin)


def imported_names(path: Path) -> set[str]:
    """Every module an ``import`` or ``from ... import`` in the file names, relative imports
    resolved against the file's package."""
    tree = ast.parse(path.read_text())
    package = _package_of(path)
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                module = f"{base}.{node.module}" if node.module else base
            else:
                module = node.module
            names.add(module)
            names.update(f"{module}.{alias.name}" for alias in node.names)
    return names


def _package_of(path: Path) -> str:
    parts = []
    folder = path.parent
    while (folder / "__init__.py").exists():
        parts.append(folder.name)
        folder = folder.parent
    return ".".join(reversed(parts))


def test_the_distribution_ships_the_three_packages_and_the_console_script():
    scripts = importlib.metadata.entry_points(group="console_scripts")
    assert any(script.name == "minipaged" for script in scripts)
    for package in PACKAGES:
        assert importlib.import_module(package).__file__


@pytest.mark.parametrize("name", DESIGNED_MODULES)
def test_every_module_the_design_names_imports(name):
    importlib.import_module(name)


def test_the_kernels_and_their_cpu_twins_offer_the_reference_signature():
    import inspect

    import cuda_kernels
    import cuda_kernels.cpu
    from minipaged import attention

    reference = list(inspect.signature(attention.paged_attention_decode).parameters)[:7]
    assert reference == [
        "query",
        "key_pool",
        "value_pool",
        "block_tables",
        "seq_lens",
        "scale",
        "block_size",
    ]
    for package in (cuda_kernels, cuda_kernels.cpu):
        for name in ("paged_attention_decode", "paged_attention_decode_v2"):
            parameters = list(inspect.signature(getattr(package, name)).parameters)
            assert parameters[:7] == reference, (package.__name__, name)
        v2 = inspect.signature(package.paged_attention_decode_v2).parameters
        assert "partition_size" in v2


@pytest.mark.parametrize("name", PAGING_MODULES)
def test_paging_modules_import_no_torch(name):
    imports = imported_names(module_file(name))
    assert not {m for m in imports if m == "torch" or m.startswith("torch.")}, name


@pytest.mark.parametrize("name", ["minipaged.attention", "minipaged.kv_cache"])
def test_the_reference_imports_no_kernel(name):
    imports = imported_names(module_file(name))
    assert not {m for m in imports if m.split(".")[0] == "cuda_kernels"}, name


def test_one_backend_module_is_the_only_importer_of_cuda_kernels_on_the_serving_path():
    """The engine reaches the kernels through ``minipaged.backend`` alone. The grader, which
    owns running a student's code, runs and times a student's kernel beside the library's, so
    it is the one other importer (DESIGN.md states the rule within the engine's pipeline)."""
    root = Path(importlib.import_module("minipaged").__file__).parent
    importers = {
        path.relative_to(root)
        for path in package_files("minipaged")
        if any(m.split(".")[0] == "cuda_kernels" for m in imported_names(path))
    }
    assert {p for p in importers if p.parts[0] != "grader"} <= {Path("backend.py")}, importers


@pytest.mark.parametrize("package", PACKAGES)
def test_no_module_is_over_400_lines(package):
    long = {
        str(path): n
        for path in package_files(package)
        if (n := len(path.read_text().splitlines())) > 400
    }
    assert not long


@pytest.mark.parametrize("package", PACKAGES)
def test_no_module_is_named_for_a_layer_of_abstraction(package):
    names = {path.stem for path in package_files(package)}
    assert not names & LAYER_NAMES


def test_every_submodule_of_the_three_packages_imports():
    """A reader can open any module; none needs a GPU or the simulator just to import."""
    for package in PACKAGES:
        root = importlib.import_module(package)
        for info in pkgutil.walk_packages(root.__path__, prefix=f"{package}."):
            if info.name.endswith("__main__"):
                continue
            importlib.import_module(info.name)
