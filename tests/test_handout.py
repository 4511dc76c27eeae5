"""The handout a student gets with only the wheel: ``minipaged exercises init N DIR`` copies a
README whose links and commands are right where it is copied, ``check`` run inside that folder
grades it, a missing extra is named with what to install, and a system without ``resource``
(Windows) can still list and copy the exercises and is refused grading in one line."""

from __future__ import annotations

import ast
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from exercise01_answers import ROUNDED_DOWN, answered

from minipaged import cli
from minipaged.grader import exercises, handout, student_folder
from minipaged.grader.exercises import EXERCISES, TUTORIALS

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
COMMAND = re.compile(r"`(minipaged [^`]+)`")


def site_page_exists(url: str) -> bool:
    """Whether ``url``, an address under the site, names a page the site has: a Markdown file
    of docs/, or an exercise's page, which the site's build makes from its README."""
    path = url.removeprefix(handout.SITE_URL).partition("#")[0].rstrip("/")
    if path.startswith("course/") and (TUTORIALS / path.removeprefix("course/")).is_dir():
        return True
    return (DOCS / f"{path}.md").is_file() or (DOCS / path / "index.md").is_file()


def test_the_handouts_site_is_the_one_mkdocs_publishes():
    config = (ROOT / "mkdocs.yml").read_text()
    assert f"site_url: {handout.SITE_URL}\n" in config
    assert "use_directory_urls: false" not in config  # pages are folders: explanation/x/


@pytest.mark.parametrize("number", sorted(EXERCISES))
def test_every_link_of_a_copied_readme_works_where_it_is_copied(number, tmp_path):
    folder = tmp_path / "ex"
    handout.init(number, folder)
    readme = (folder / "README.md").read_text()
    links = LINK.findall(readme)
    assert links, "every README links to what to read first"
    for target in links:
        if target.startswith("http"):
            assert target.startswith(handout.SITE_URL) and site_page_exists(target), target
        else:
            assert (folder / target.partition("#")[0]).is_file(), target
    assert "starter/" not in readme and "](../" not in readme


@pytest.mark.parametrize("number", sorted(EXERCISES))
def test_every_command_of_a_readme_names_its_exercise_and_no_folder_that_is_not_there(number):
    readme = (TUTORIALS / EXERCISES[number].folder / "README.md").read_text()
    commands = COMMAND.findall(readme)
    assert f"minipaged exercises check {number}" in commands
    for command in commands:
        assert "tutorials/" not in command and "starter" not in command, command


def test_a_link_a_copied_folder_cannot_follow_is_refused_with_the_file_named():
    assert handout.rewrite_link("starter/memory.py", "01-x") == "memory.py"
    assert handout.rewrite_link("../../docs/index.md", "01-x") == handout.SITE_URL
    assert handout.rewrite_link("../03-fork/README.md#hints", "01-x") == (
        handout.SITE_URL + "course/03-fork/#hints"
    )
    assert handout.rewrite_link("#tasks", "01-x") == "#tasks"
    with pytest.raises(ValueError, match=r"tutorials/01-x/README.md links to '\.\./\.\./pyproject"):
        handout.rewrite_link("../../pyproject.toml", "01-x")


def test_check_inside_a_folder_init_made_grades_that_folder(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert cli.main(["exercises", "init", "1", "ex01"]) == 0
    capsys.readouterr()
    answered(tmp_path / "ex01", ROUNDED_DOWN)
    monkeypatch.chdir(tmp_path / "ex01")
    assert cli.main(["exercises", "check", "1"]) == 1
    printed = capsys.readouterr().out
    assert f"graded: {tmp_path / 'ex01'}" in printed
    assert "7 pass, 1 fail, 0 blocked, 87/100 points" in printed
    assert (tmp_path / "ex01" / "report.json").is_file()
    assert not (exercises.EXERCISES[1].starter / "report.json").exists()


def test_an_installed_package_outside_an_exercise_folder_says_where_to_run(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(student_folder, "SOURCE_CHECKOUT", False)
    assert cli.main(["exercises", "check", "4"]) == 2
    error = capsys.readouterr().err.strip()
    assert "\n" not in error
    assert f"this folder ({tmp_path}) has no block_manager.py" in error
    assert "minipaged exercises init 4 DIR" in error and "--path DIR" in error


def run_python(code: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=300
    )


HIDDEN = """import contextlib, io, json, sys
sys.modules[{module!r}] = None
from minipaged.cli import main
ran = []
for argv in {commands!r}:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = main(argv)
        except SystemExit as stopped:
            status = stopped.code
    ran.append((status, out.getvalue(), err.getvalue()))
sys.__stdout__.write(json.dumps(ran))
"""


def hidden(module: str, cwd: Path, *commands: list[str]) -> list[tuple[int, str, str]]:
    """``minipaged *argv`` for each of ``commands``, in order, in one interpreter where
    ``module`` is not installed: each one's exit status, stdout and stderr. One interpreter
    for all of them (not one each) spares starting Python and the library again; an exception
    that escapes ``main`` ends it, and is caught here as its traceback."""
    done = run_python(HIDDEN.format(module=module, commands=[list(c) for c in commands]), cwd)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    return [tuple(run) for run in json.loads(done.stdout)]


def test_without_numba_init_and_check_say_what_to_install(tmp_path):
    (init, check) = hidden(
        "numba",
        tmp_path,
        ["exercises", "init", "8", "ex08"],
        ["exercises", "check", "8", "--path", "ex08"],
    )
    assert init[0] == 0, init
    assert 'needs numba, which is not installed here: pip install "minipaged[cuda]"' in init[1]
    assert check[0] == 1, check
    assert check[1].count('pip install "minipaged[cuda]"') == len(EXERCISES[8].criteria())
    assert "No module named" not in check[1]


def test_the_cuda_extra_installs_what_the_kernel_exercises_need():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    for module, extra in exercises.EXTRAS.items():
        assert any(re.match(rf"{module}\b", requirement) for requirement in extras[extra])


def test_without_resource_init_and_list_work_and_check_is_refused_in_one_line(tmp_path):
    """Windows has no ``resource`` module."""
    (init, listed, check) = hidden(
        "resource",
        tmp_path,
        ["exercises", "init", "1", "ex01"],
        ["exercises", "list"],
        ["exercises", "check", "1", "--path", "ex01"],
    )
    assert init[0] == 0, init
    assert (tmp_path / "ex01" / "memory.py").is_file()
    assert listed[0] == 0, listed
    assert check[0] == 2, check
    assert check[2].count("\n") == 1 and "in WSL on Windows" in check[2]
    assert "Traceback" not in check[2]


@pytest.mark.slow
def test_a_student_with_only_the_wheel_runs_the_readmes_commands_as_written(tmp_path):
    """Build the wheel, install it (no dependencies: a fresh virtual environment reads this
    one's packages through a .pth file), copy exercise 01 out with init and run every
    ``minipaged exercises`` command of its README, literally, inside the copied folder."""
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    for name in ("minipaged", "cuda_kernels", "tui", "tutorials"):
        ignore = shutil.ignore_patterns("__pycache__", "report.json")
        shutil.copytree(ROOT / name, source / name, symlinks=True, ignore=ignore)
    wheels = tmp_path / "wheels"
    build = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q"]
    subprocess.run(build + [str(source), "-w", str(wheels)], check=True, timeout=600)
    (wheel,) = wheels.glob("minipaged-*.whl")

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    ours = [p for p in sys.path if p.endswith("site-packages") and Path(p).is_dir()]
    (Path(site) / "dev-packages.pth").write_text("\n".join(ours) + "\n")
    install = [python, "-m", "pip", "install", "--no-deps", "-q", str(wheel)]
    subprocess.run(install, check=True, timeout=600)

    env = dict(os.environ, PATH=f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}")
    env.pop("PYTHONPATH", None)
    where = subprocess.run(
        ["minipaged", "exercises", "init", "1", "ex01"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert where.returncode == 0, where.stderr
    folder = tmp_path / "ex01"
    located = subprocess.run(
        [python, "-c", "import minipaged; print(minipaged.__file__)"],
        capture_output=True,
        text=True,
        cwd=folder,
        env=env,
    ).stdout
    assert located.startswith(site), located  # the wheel, not the source checkout
    answered(folder, ROUNDED_DOWN)
    commands = [
        c for c in COMMAND.findall((folder / "README.md").read_text()) if " exercises " in c
    ]
    assert commands
    for command in commands:
        done = subprocess.run(
            shlex.split(command), cwd=folder, env=env, capture_output=True, text=True, timeout=600
        )
        if " exercises hint " in command:  # the second tier of hints, from the installed wheel
            assert done.returncode == 0 and "hints" in done.stdout, (command, done.stderr)
            continue
        assert done.returncode == 1, (command, done.stdout, done.stderr)
        assert f"graded: {folder}" in done.stdout
        assert "7 pass, 1 fail" in done.stdout
    assert (folder / "report.json").is_file()


@pytest.mark.parametrize("number", sorted(EXERCISES))
def test_hint_prints_the_readmes_hints_and_tier_2_only_when_asked(number, capsys):
    readme = (TUTORIALS / EXERCISES[number].folder / "README.md").read_text()
    second = (TUTORIALS / EXERCISES[number].folder / "hints.md").read_text()
    assert cli.main(["exercises", "hint", str(number)]) == 0
    first = capsys.readouterr().out
    assert readme.partition("## Hints\n")[2].split("\n")[1].strip()[:40] in first
    assert second.splitlines()[-1].strip() not in first
    assert cli.main(["exercises", "hint", str(number), "--tier", "2"]) == 0
    assert second.splitlines()[-1].strip() in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["exercises", "hint", "4", "--tier", "3"], "must be between 1 and 2, got 3"),
        (
            ["exercises", "hint", str(len(EXERCISES) + 1)],
            f"no exercise {len(EXERCISES) + 1}; the exercises are 1..{len(EXERCISES)}",
        ),
    ],
)
def test_a_hint_that_does_not_exist_is_refused_in_one_line(argv, words, capsys):
    try:
        status = cli.main(argv)
    except SystemExit as stopped:  # argparse's usage error
        status = stopped.code
    assert status in (1, 2)
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) <= 2 and words in error[-1]


# -- an instructor's own site ----------------------------------------------------------------

ELSEWHERE = "https://courses.example.edu/paged"


@pytest.mark.parametrize("given", ["flag", "environment"])
def test_the_handout_links_to_the_site_the_instructor_publishes(given, tmp_path, monkeypatch):
    monkeypatch.delenv(handout.SITE_URL_VARIABLE, raising=False)
    argv = ["exercises", "init", "4", str(tmp_path / "ex04")]
    if given == "flag":
        monkeypatch.setenv(handout.SITE_URL_VARIABLE, "https://ignored.example/")
        argv += ["--site-url", ELSEWHERE]
    else:
        monkeypatch.setenv(handout.SITE_URL_VARIABLE, ELSEWHERE)
    assert cli.main(argv) == 0
    targets = LINK.findall((tmp_path / "ex04" / "README.md").read_text())
    remote = [t for t in targets if "://" in t]
    assert remote and all(t.startswith(ELSEWHERE + "/") for t in remote), remote
    for target in remote:  # the same pages as on the project's site
        assert site_page_exists(handout.SITE_URL + target.removeprefix(ELSEWHERE + "/"))


@pytest.mark.parametrize(
    "url",
    [
        "",
        "example.org/minipaged/",
        "ftp://example.org/minipaged/",
        "https://",
        "https://example.org/a b/",
        "https://example.org/(x)/",
        "https://example.org/?page=1",
        "https://example.org/#top",
        "https://example.org:99999/",
        "javascript:alert(1)",
    ],
)
def test_a_site_url_that_is_not_a_web_address_is_refused_in_one_line(url, tmp_path, capsys):
    target = tmp_path / "ex01"
    try:
        status = cli.main(["exercises", "init", "1", str(target), "--site-url", url])
    except SystemExit as stopped:  # argparse's usage error
        status = stopped.code
    assert status == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and repr(url) in error[0] and "https://" in error[0]
    assert not target.exists()


def test_a_bad_site_url_in_the_environment_is_named_and_nothing_is_copied(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.setenv(handout.SITE_URL_VARIABLE, "example.org")
    assert cli.main(["exercises", "init", "1", str(tmp_path / "ex01")]) != 0
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and "$MINIPAGED_SITE_URL 'example.org'" in error[0]
    assert not (tmp_path / "ex01").exists()


# -- every refusal of the handout, one line ---------------------------------------------------


def _refusals(tmp_path: Path) -> dict[str, tuple]:
    """A bad input for each refusal ``handout`` can make: the call, and the value the message
    must name."""
    (tmp_path / "dangling").symlink_to(tmp_path / "gone")
    (tmp_path / "file").write_text("x")
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "memory.py").write_text("x")
    return {
        "site": (lambda: handout.site_url("ftp://example.org/"), "'ftp://example.org/'"),
        "empty folder name": (lambda: handout.init(1, " "), "DIR"),
        "control character": (lambda: handout.init(1, "ex\n01"), r"'ex\n01'"),
        "dangling link": (lambda: handout.init(1, tmp_path / "dangling"), "dangling"),
        "under a file": (lambda: handout.init(1, tmp_path / "file" / "ex01"), "file"),
        "folder taken": (lambda: handout.init(1, tmp_path / "taken"), "memory.py"),
        "link nowhere": (lambda: handout.rewrite_link("../../x.toml", "01-x"), "'../../x.toml'"),
        "inside the library": (lambda: handout.init(1, Path(handout.__file__).parent), "grader"),
        "no file can be made": (lambda: handout.init(1, "/proc/minipaged/ex01"), "/proc"),
    }


def test_every_refusal_of_the_handout_is_one_line_naming_the_value(tmp_path):
    """The command line prints a refusal as it is: a newline in one (a message built over two
    lines, a value shown with ``str`` where it holds one) breaks it into a line that names
    nothing. Every ``raise`` of ``handout.py`` is reached by a case here, so a refusal added
    later without one fails this test until it has its case."""
    source = Path(handout.__file__).read_text()
    raises = {n.lineno for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Raise)}
    reached = set()
    for name, (call, value) in _refusals(tmp_path).items():
        with pytest.raises(ValueError) as refused:
            call()
        message, frame = str(refused.value), refused.traceback[-1]
        assert Path(str(frame.path)) == Path(handout.__file__), name
        reached.add(frame.lineno + 1)  # pytest counts lines from 0
        assert message.isprintable() and value in message, (name, message)
    assert reached == raises
