"""A file already where a writer puts its own, reached from Python and from the commands that
had no ``--force``. The command line refused to replace a file it had not written
(``test_existing_output_corpus``), but ``trace.save``, ``Recorder``, ``Tokenizer.save``,
``save_model``, ``Report.save``, the benchmarks' plots and page, ``python -m minipaged.train
--out`` and ``bench --out`` replaced whatever stood there: a notebook's ``trace.save("notes.txt",
...)`` lost the notes, ``train --out`` at another model's folder its weights and config.

Now every writer names the kind of file it writes, and the one rule
(``minipaged.replaceable``), asked where the file is made (``atomic_write.Replacement``) and by
each command before any work, refuses a file of another kind unless ``force=True`` (``--force``).
The writers are found by searching the package's source for every call that writes a file,
so a writer added later without a case here fails ``test_every_writer_in_the_package_is_a_case``.
"""

from __future__ import annotations

import ast
import contextlib
import io
import json
import os
import re
import struct
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from rich.console import Console

from minipaged import cli, trace
from minipaged.checkpoint import load_model, save_model
from minipaged.checkpoint_kinds import KINDS
from minipaged.grader.report import Report
from minipaged.grader.report_files import save as save_report
from minipaged.models import EMBEDDED_MODELS, model_directory
from minipaged.study import bench
from minipaged.study.bench import plot
from minipaged.tokenizer import Tokenizer

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("minipaged", "tui", "cuda_kernels")
SCRIPTS = ("docs",)
"""The site's build scripts and hooks, outside the package: searched too, so that a writer
there is a case or names its exemption in ``EXEMPT`` like any other."""
MECHANISM = Path("minipaged") / "atomic_write.py"
"""The one writer every other goes through: its own calls are the rule, not users of it."""

NOTES = b"my notes, named like an output\n"
"""A file no minipaged writer wrote: the user's, to be left as it was."""

# What writes a file, by the name called: a method of anything (a Path's write_text, a
# figure's savefig), a function of a module, and open() in a mode that writes.
WRITING_METHODS = {"write_text", "write_bytes", "savefig", "save_pretrained", "to_file"}
WRITING_FUNCTIONS = {
    "atomic_write": {"Replacement", "replacing", "write_text", "write_bytes", "create"},
    "os": {"replace", "rename", "link", "symlink"},
    "shutil": {"copy", "copy2", "copyfile", "copytree", "move"},
    "torch": {"save"},
    "safetensors.torch": {"save_file"},
}
WRITING_NAMES = {"Replacement", "replacing", "save_file"}  # imported bare
OPENERS = {"open", "fdopen"}
WRITING_FLAGS = ("O_WRONLY", "O_RDWR", "O_CREAT", "O_TRUNC", "O_APPEND")


def _writes(call: ast.Call) -> bool:
    func = call.func
    if isinstance(func, ast.Name):
        name, owner = func.id, None
    elif isinstance(func, ast.Attribute):
        name, owner = func.attr, ast.unparse(func.value)
    else:
        return False
    if name in WRITING_FUNCTIONS.get(owner, ()) or (owner is None and name in WRITING_NAMES):
        return True
    if owner == "os" and name == "open":  # os.open(path, flags): by its flags
        return any(flag in ast.unparse(call) for flag in WRITING_FLAGS)
    if name in OPENERS:  # open(path, mode), path.open(mode), os.fdopen(fd, mode)
        position = 0 if owner not in (None, "os", "io") else 1
        modes = [k.value for k in call.keywords if k.arg == "mode"]
        modes += call.args[position : position + 1]
        if not modes:
            return False  # "r"
        mode = modes[0]
        if not (isinstance(mode, ast.Constant) and isinstance(mode.value, str)):
            return True  # a mode worked out at run time may write: named here to be judged
        return any(letter in mode.value for letter in "wax+")
    return name in WRITING_METHODS and owner is not None


def writers_in_package() -> set[str]:
    """``module:function`` for every function of the package (and of the site's scripts) that
    writes a file itself."""
    found: set[str] = set()
    for package in (*PACKAGES, *SCRIPTS):
        for path in sorted((ROOT / package).rglob("*.py")):
            relative = path.relative_to(ROOT)
            if relative == MECHANISM:
                continue
            module = ".".join(relative.with_suffix("").parts).removesuffix(".__init__")
            found |= {f"{module}:{where}" for where in _writing_functions(path)}
    return found


def _writing_functions(path: Path) -> Iterator[str]:
    def visit(node: ast.AST, names: tuple[str, ...]) -> Iterator[str]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                yield from visit(child, (*names, child.name))
                continue
            if isinstance(child, ast.Call) and _writes(child):
                yield ".".join(names) or "<module>"
            yield from visit(child, names)

    yield from visit(ast.parse(path.read_text(), str(path)), ())


@pytest.fixture(scope="module")
def tiny():
    return load_model("tiny")


def _report() -> Report:
    return Report(exercise=1, title="Memory math", graded="solution")


def _figure():
    fig, (axes,) = plot.figure()
    axes.plot([0, 1], [1, 0])
    return fig


WRITERS: dict[str, Callable[..., Path]] = {
    # Each writes its file over `target`'s folder's file (which it returns): from a folder
    # holding a file no minipaged writer wrote, refused without force, replaced with it.
    "minipaged.trace:Recorder.__init__": lambda tmp, force, tiny: _call(
        tmp / "run.jsonl", lambda path: trace.save(path, {"model": "tiny"}, [], force=force)
    ),
    "minipaged.tokenizer:Tokenizer.save": lambda tmp, force, tiny: _call(
        tmp / "tokenizer.json",
        lambda path: Tokenizer(model_directory("tiny")).save(path, force=force),
    ),
    "minipaged.checkpoint:write_together": lambda tmp, force, tiny: _call(
        tmp / "model" / "config.json",
        lambda path: save_model(tiny, EMBEDDED_MODELS["tiny"], path.parent, force=force),
    ),
    "minipaged.grader.report:Report.save": lambda tmp, force, tiny: _call(
        tmp / "report.json", lambda path: _report().save(path, force=force)
    ),
    "minipaged.grader.report_files:save": lambda tmp, force, tiny: _call(
        tmp / "results.json",
        lambda path: save_report(
            Console(file=io.StringIO()), 1, path, _report().to_dict(), force=force
        ),
    ),
    "minipaged.study.bench.plot:save": lambda tmp, force, tiny: _call(
        tmp / "memory.svg",
        lambda path: plot.save(_figure(), path.parent, "memory", force),
    ),
    "minipaged.study.bench:run_many": lambda tmp, force, tiny: _call(
        tmp / "index.md", lambda path: _run_many(path.parent, force)
    ),
    "tui.command:screenshot.save": lambda tmp, force, tiny: _call(
        tmp / "shot.svg", lambda path: _screenshot(path, force)
    ),
}
"""Every function of the package that writes a file, and a call that reaches it."""

EXEMPT = {
    "minipaged.grader.gradebook:grade_one": "the graded folder's report.json is the grader's, "
    "whatever a student planted there (test_existing_output_corpus), and the grading's output "
    "goes to a temporary folder made for it",
    "minipaged.grader.gradebook:write_gradebook": "its own, finer rule: which class, which "
    "exercise (gradebook_place.check_gradebook_replaceable, test_gradebook_place_corpus)",
    "minipaged.grader.handout:init": "atomic_write.create: replaces nothing, FileExistsError",
    "minipaged.grader.child_process:ChildProcess.launch": "the grading child's output, in a "
    "temporary folder it has just emptied",
    "minipaged.cli:main": "opens /dev/null to stand for a standard output whose reader left",
    # The site's scripts (SCRIPTS): run by a maintainer (`make figures`, `make screenshots`,
    # `mkdocs build`), each at names of its own under docs/, .cache/ or the built site, never
    # at a path a user names; what they replace is committed, or theirs to make again.
    "docs.figures:render": "savefig into an io.BytesIO: no file (write_all puts the bytes)",
    "docs.figures:write_all": "regenerates the site's own figures (docs/assets/figures/*.svg) "
    "and the radix diagram's fence on the comparison page: committed files, at fixed names",
    "docs.screenshots:take_screenshot": "`minipaged tui --screenshot` writes the file by the "
    "screenshot's rule; this then takes the web font out of that file, just written",
    "docs.screenshots:write_crops": "cuts committed screenshots into committed crops, at fixed "
    "names under docs/assets/screenshots",
    "docs.hooks.prose_values:locked": "a lock file of the build's cache, opened to append to",
    "docs.hooks.prose_values:cached_record": "an entry of the build's own cache "
    "(.cache/prose-values), written beside its name under the process id, then put in place",
    "docs.hooks.search_text:on_post_build": "rewrites the search index that mkdocs has just "
    "written into the built site, its own output",
}
"""Writers that replace no user's file, and why."""


def _call(target: Path, write: Callable[[Path], object]) -> Path:
    target.parent.mkdir(parents=True, exist_ok=True)
    write(target)
    return target


def _run_many(out: Path, force: bool) -> None:
    """A full run writing its page in ``out``, each benchmark stubbed."""
    from minipaged.study.report import Column
    from minipaged.study.report import Report as Table

    def stub(name, options):
        return Table(name, name.title(), [Column("v", "v")], [{"v": 1}])

    real, bench.run = bench.run, stub
    try:
        bench.run_many(list(bench.SUBBENCHMARKS), bench.Options(out=out, force=force))
    finally:
        bench.run = real


def _screenshot(path: Path, force: bool) -> None:
    """``tui.command.screenshot``, its command line's check left out: the writer's own rule."""
    from tui import command

    args = command.tui_parser().parse_args([])
    said = io.StringIO()
    with contextlib.redirect_stderr(said), contextlib.redirect_stdout(io.StringIO()):
        status = command.screenshot(command.build_app(args), path, 1, args.size, [], force=force)
    if status != 0:  # what it said, as the writer's own refusal
        raise ValueError(said.getvalue())


def test_every_writer_in_the_package_is_a_case():
    found = writers_in_package()
    new = found - set(WRITERS) - set(EXEMPT)
    assert not new, f"write a case in WRITERS (or a reason in EXEMPT) for {sorted(new)}"
    gone = (set(WRITERS) | set(EXEMPT)) - found
    assert not gone, f"no longer writers, or renamed: {sorted(gone)}"


KIND_NAMED_BY = {"Replacement", "replacing", "write_text", "write_bytes"}
"""``atomic_write``'s writers that replace what stands at a name, which replace any file unless
told the kind (``replaces``); ``create`` replaces nothing."""


def writers_naming_no_kind(path: Path) -> list[int]:
    """The lines of ``path`` that call one of ``atomic_write``'s replacing writers without
    ``replaces=``."""
    return [
        node.lineno
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and ast.unparse(node.func.value) == "atomic_write"
        and node.func.attr in KIND_NAMED_BY
        and not any(keyword.arg == "replaces" for keyword in node.keywords)
    ]


def test_every_writer_names_the_kind_of_file_it_replaces():
    unnamed = [
        f"{path.relative_to(ROOT)}:{line}"
        for package in (*PACKAGES, *SCRIPTS)
        for path in sorted((ROOT / package).rglob("*.py"))
        for line in writers_naming_no_kind(path)
    ]
    assert not unnamed, f"pass replaces= (the kind of file it may replace) at {unnamed}"


def test_a_writer_naming_no_kind_is_found(tmp_path):
    source = tmp_path / "module.py"
    source.write_text(
        "atomic_write.write_text(p, 'x')\n"
        "atomic_write.write_text(p, 'x', replaces=TRACE)\n"
        "atomic_write.create(p, b'x')\n"
        "with atomic_write.replacing(p, 'wb') as r: pass\n"
    )
    assert writers_naming_no_kind(source) == [1, 4]


def test_the_search_finds_each_way_of_writing(tmp_path):
    """The search itself, on a module of each kind of write (and of reads it must pass)."""
    source = tmp_path / "module.py"
    source.write_text(
        "def a(p): open(p, 'w')\n"
        "def b(p): p.open('ab')\n"
        "def c(p): p.write_text('x')\n"
        "def d(p): os.replace(p, p)\n"
        "def e(p): os.open(p, os.O_WRONLY | os.O_CREAT)\n"
        "def f(p, mode): open(p, mode)\n"
        "class G:\n    def h(self, p): atomic_write.Replacement(p)\n"
        "def r(p): open(p); open(p, 'rb'); p.open(); os.open(p, os.O_RDONLY)\n"
        "def s(p): 'a'.replace('a', 'b'); p.read_text()\n"
    )
    assert set(_writing_functions(source)) == {"a", "b", "c", "d", "e", "f", "G.h"}


@pytest.mark.parametrize("writer", WRITERS)
def test_a_file_of_another_kind_is_refused_naming_it_and_force(writer, tmp_path, tiny):
    target = WRITERS[writer](tmp_path / "probe", True, tiny)  # where it writes
    target.write_bytes(NOTES)
    before = sorted(p.name for p in target.parent.iterdir())
    with pytest.raises(ValueError) as refused:
        WRITERS[writer](tmp_path / "probe", False, tiny)
    message = str(refused.value)
    assert str(target) in message and "is not" in message and "force=True" in message, message
    assert target.read_bytes() == NOTES
    assert sorted(p.name for p in target.parent.iterdir()) == before, "nothing else made"


@pytest.mark.parametrize("writer", WRITERS)
def test_force_replaces_it_and_a_second_write_needs_none(writer, tmp_path, tiny):
    target = tmp_path / "probe"
    written = WRITERS[writer](target, True, tiny)
    first = written.read_bytes()
    written.write_bytes(NOTES)
    WRITERS[writer](target, True, tiny)
    assert written.read_bytes() != NOTES
    WRITERS[writer](target, False, tiny)  # its own file: replaced without being told
    assert written.read_bytes() not in (b"", NOTES)
    assert first


ANOTHER_MODEL = {  # each file of a Hugging Face save of another model, as it would stand
    "config.json": json.dumps(
        {"architectures": ["LlamaForCausalLM"], "transformers_version": "4.51.0"}
    ).encode(),
    "generation_config.json": b'{"bos_token_id": 1, "do_sample": true}',
    "tokenizer_config.json": b'{"tokenizer_class": "LlamaTokenizer", "chat_template": "x"}',
    "tokenizer.json": NOTES,
    "model.safetensors": struct.pack("<Q", 2) + b"{}",
}


def test_every_file_of_a_checkpoint_has_a_case_of_another_model():
    assert set(ANOTHER_MODEL) == set(KINDS)


@pytest.mark.parametrize("name", ANOTHER_MODEL)
def test_save_model_over_another_models_file_replaces_none_of_the_folder(name, tmp_path, tiny):
    folder = tmp_path / "model"
    save_model(tiny, EMBEDDED_MODELS["tiny"], folder)
    (folder / name).write_bytes(ANOTHER_MODEL[name])
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    with pytest.raises(ValueError, match=re.escape(f"{folder / name} is there and is not")):
        save_model(tiny, EMBEDDED_MODELS["tiny"], folder)
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before


def test_train_out_at_another_models_folder_is_refused_before_training(tmp_path, capsys):
    from minipaged import train

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("A paragraph.\n" * 10)
    out = tmp_path / "model"
    out.mkdir()
    (out / "config.json").write_bytes(ANOTHER_MODEL["config.json"])
    with pytest.raises(SystemExit) as ended:
        train.parse_args(["--corpus", str(corpus), "--out", str(out)])
    err = capsys.readouterr().err
    assert ended.value.code == 2
    assert f"{out / 'config.json'} is there and is not" in err and "give --force" in err, err
    args = train.parse_args(["--corpus", str(corpus), "--out", str(out), "--force"])
    assert args.force


@pytest.mark.parametrize("name", ["memory.svg", "index.md"])
def test_bench_out_over_a_file_of_another_kind_is_refused_before_it_measures(
    name, tmp_path, capsys
):
    (tmp_path / name).write_bytes(NOTES)
    argv = ["bench", "memory", "--out", str(tmp_path)]  # a page there: it would be refreshed
    assert cli.main(argv) == 2
    out, err = capsys.readouterr()
    assert err.count("\n") == 1 and f"{tmp_path / name} is there and is not" in err, err
    assert "give --force" in err and "Traceback" not in err
    assert "bench memory" not in out, "refused before the benchmark ran"
    assert (tmp_path / name).read_bytes() == NOTES
    assert os.listdir(tmp_path) == [name]
