"""What a grading child's interpreter reads as it starts: none of the user's site folder, and
no start-up file the environment names, so that what one student's code wrote there cannot
run in a later grading of another student; and its caches and home are its own folder.

The tests point ``HOME`` at a temporary folder: nothing is written to the real one."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from exercise01_answers import answered

from minipaged.grader.child_environment import PRIVATE, child_environment
from minipaged.grader.grading import Limits, grade

LIMITS = Limits(check_seconds=10.0, memory_gib=2.0, wall_seconds=300.0, disk_gib=0.1)

STARTUP = "import pathlib; pathlib.Path({marker!r}).write_text('ran')\n"
"""A start-up file's code: it leaves ``marker`` behind where an interpreter ran it."""


def _user_site(home: Path) -> Path:
    """The user site folder of a Python whose ``HOME`` is ``home`` (``PYTHONUSERBASE`` unset)."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    return home / ".local" / "lib" / version / "site-packages"


def _plant(home: Path, elsewhere: Path, marker: Path) -> None:
    """The start-up files a student's code could write, each leaving ``marker`` when run: a
    ``usercustomize.py`` and a ``.pth`` in the user site of ``home``, and a
    ``sitecustomize.py`` in ``elsewhere``, a folder ``PYTHONPATH`` names."""
    user = _user_site(home)
    user.mkdir(parents=True)
    (user / "usercustomize.py").write_text(STARTUP.format(marker=f"{marker}.user"))
    (user / "zz-planted.pth").write_text(STARTUP.format(marker=f"{marker}.pth").strip() + "\n")
    elsewhere.mkdir()
    (elsewhere / "sitecustomize.py").write_text(STARTUP.format(marker=f"{marker}.site"))


def _markers(marker: Path) -> list[str]:
    return sorted(p.name for p in marker.parent.glob(f"{marker.name}.*"))


def test_a_child_runs_no_start_up_file_of_the_user_site_or_the_environment(tmp_path, monkeypatch):
    """A plain Python with this environment runs the planted files (so the test can fail:
    the user site's too, where that Python reads one, as one outside a virtual environment
    does); a grading of an honest answer runs none, and scores 100."""
    home, elsewhere, marker = tmp_path / "home", tmp_path / "elsewhere", tmp_path / "ran"
    _plant(home, elsewhere, marker)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("PYTHONUSERBASE", raising=False)
    monkeypatch.delenv("PYTHONNOUSERSITE", raising=False)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(elsewhere), *sys.path[1:]]))
    plain = subprocess.run(
        [sys.executable, "-c", "import site; print(site.ENABLE_USER_SITE)"],
        check=True,
        timeout=120,
        capture_output=True,
        text=True,
    )
    user_site = plain.stdout.strip() == "True"
    assert _markers(marker) == (["ran.pth", "ran.site", "ran.user"] if user_site else ["ran.site"])
    for planted in marker.parent.glob("ran.*"):
        planted.unlink()
    report = grade(1, answered(tmp_path / "honest"), limits=LIMITS)
    assert report.score == 100, [r.message for r in report.results if r.message]
    assert _markers(marker) == []


LEAVES_A_START_UP_FILE = (
    "import os, pathlib\n"
    "    for folder in ({user!r}, os.path.join(os.path.expanduser('~'), {relative!r})):\n"
    "        try:\n"
    "            os.makedirs(folder, exist_ok=True)\n"
    "            pathlib.Path(folder, 'usercustomize.py').write_text({code!r})\n"
    "        except OSError:\n"
    "            pass\n"
    "    return t // block_size"
)
"""Exercise 01's ``logical_block``, right, after writing a ``usercustomize.py`` into the user
site of the grader's home and of its own ``~``, which would run in every later Python that
reads the user site."""


def test_what_a_student_writes_in_the_user_site_runs_in_no_later_grading(tmp_path, monkeypatch):
    """Mallory's code writes a ``usercustomize.py`` into the user site. Where Landlock
    confines the grading, the write fails; where it cannot, it succeeds, and Alice's grading
    after it runs it nowhere all the same: her child reads no user site. The child's own
    ``~`` is its temporary folder, removed with it."""
    home, marker = tmp_path / "home", tmp_path / "ran"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("PYTHONUSERBASE", raising=False)
    user = _user_site(home)
    relative = str(user.relative_to(home))
    body = LEAVES_A_START_UP_FILE.format(
        user=str(user), relative=relative, code=STARTUP.format(marker=f"{marker}.user")
    )
    mallory = answered(tmp_path / "mallory", {"return j = floor(t / B)": body})
    first = grade(1, mallory, limits=LIMITS)
    assert first.score == 100
    written = (user / "usercustomize.py").exists()
    assert written == first.confinement.startswith("unconfined"), first.confinement
    alice = grade(1, answered(tmp_path / "alice"), limits=LIMITS)
    assert alice.score == 100
    assert _markers(marker) == []


def test_a_child_s_home_and_caches_are_its_own_folder(tmp_path):
    parent = {"HOME": "/home/someone", "PYTHONPATH": "/x", "PYTHONSTARTUP": "/y", "PATH": "/bin"}
    env = child_environment(parent, tmp_path, simulator=False)
    assert {name: env[name] for name in PRIVATE} == dict.fromkeys(PRIVATE, str(tmp_path))
    assert "HOME" in PRIVATE and "NUMBA_CACHE_DIR" in PRIVATE
    assert not [name for name in env if name.startswith("PYTHON")]
