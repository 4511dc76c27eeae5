"""The grading child's first lines, run as a file by an isolated Python:
``python -I -B child_start.py ROOTS... -- ARGUMENTS`` (``child_process.ChildProcess.command``).

An isolated Python searches only its own installation: no ``PYTHONPATH``, no user site, no
current folder. So this file puts the child's folder first on its path, where ``-m`` would
(``child_setup.prepare`` puts the student's there), then ``ROOTS``, the folders the grader
found the library in that such a Python would not search, and runs
``minipaged.grader.child``'s ``main`` with ``ARGUMENTS``. It is a file of the library, run by
its name, so that no frame of the child's is code compiled from a string."""

import os
import sys

if __name__ == "__main__":
    end = sys.argv.index("--")
    sys.path[:0] = [os.getcwd(), *sys.argv[1:end]]
    del sys.argv[1 : end + 1]
    from minipaged.grader.child import main

    main()
