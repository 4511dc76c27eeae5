"""The environment variables a grading child starts with: what the library and the GPU's
driver need, and nothing else of the grader's.

A student's code reads its environment as easily as its arguments (``os.environ``), and
whatever it raises or prints comes back in the report the student reads. The grader may run
where its environment holds what no student should see: an autograder's API token, a cloud
key, a database password, the instructor's paths. So the child gets only the variables
``KEPT`` names (the locale's, the libraries' and the GPU's settings), with its home, caches
and temporary files in its own folder (``PRIVATE``) and the libraries' thread pools at one
thread (``left_running.ONE_THREAD``).

No ``PYTHON*`` variable is kept: the child's interpreter starts isolated (``python -I``,
``child_process.ChildProcess.command``), reading neither them nor the user's site folder,
so a ``sitecustomize.py`` on ``PYTHONPATH``, or a ``usercustomize.py`` or ``.pth`` that one
student's code wrote into ``~/.local``, runs in no later grading. Its ``HOME`` is its own
folder, so what a library or a student's code keeps under ``~`` (Numba's and torch's
settings, a cache) is read from and written to that folder only, and removed with it.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from minipaged.grader.left_running import ONE_THREAD

KEPT = (
    "PATH",
    "USER",
    "LANG",
    "LANGUAGE",
    "TZ",
    "LD_LIBRARY_PATH",
    "VIRTUAL_ENV",
    "CONDA_PREFIX",
    "LC_*",
    "NUMBA_*",
    "CUDA_*",
    "NVIDIA_*",
    "PYTORCH_*",
    "TORCH_*",
    "OMP_*",
    "MKL_*",
    "OPENBLAS_*",
    "KMP_*",
    "COVERAGE_*",
    "COV_CORE_*",
)
"""The variables a child keeps, by name, or by the start of their name where it ends in
``*``: the programs' search path, the locale, and the settings of the libraries the
exercises use (Numba, the CUDA driver, torch, the BLAS libraries), and a coverage run's
(which measures the child too)."""

PRIVATE = (
    "HOME",
    "TMPDIR",
    "XDG_CACHE_HOME",
    "XDG_CONFIG_HOME",
    "NUMBA_CACHE_DIR",
    "MPLCONFIGDIR",
    "CUDA_CACHE_PATH",
)
"""The variables naming the home folder and where libraries keep their settings, caches and
temporary files: the child's own folder, which the grader empties."""


def kept(name: str) -> bool:
    """Whether a variable named ``name`` passes into a grading child (``KEPT``)."""
    return any(name.startswith(rule[:-1]) if rule.endswith("*") else name == rule for rule in KEPT)


def child_environment(parent: Mapping[str, str], temp: Path, simulator: bool) -> dict[str, str]:
    """The environment of a grading child whose folder is ``temp``, from the grader's
    ``parent``: ``KEPT``'s variables, ``PRIVATE``'s in ``temp``, ``ONE_THREAD``, and Numba's
    CUDA simulator on where the child's criteria run in it (``simulator``), off elsewhere."""
    env = {name: value for name, value in parent.items() if kept(name)}
    env |= dict.fromkeys(PRIVATE, str(temp)) | ONE_THREAD
    if simulator:
        env["NUMBA_ENABLE_CUDASIM"] = "1"
    else:
        env.pop("NUMBA_ENABLE_CUDASIM", None)
    return env
