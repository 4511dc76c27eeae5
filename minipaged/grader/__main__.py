"""``python -m minipaged.grader N --runs-in process|simulator|gpu [--path DIR | --solution]``:
grade the criteria of exercise N that run in that environment, in this process, printing each
result as a line of JSON as it finishes. The grader starts this in a child process with the
environment and resource limits set (``minipaged.grader.grading``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from minipaged.grader.grading import grade_here, limit_resources

parser = argparse.ArgumentParser(prog="python -m minipaged.grader")
parser.add_argument("number", type=int)
parser.add_argument("--runs-in", choices=["process", "simulator", "gpu"], required=True)
parser.add_argument("--path", type=Path)
parser.add_argument("--solution", action="store_true")
parser.add_argument("--check-seconds", type=float, required=True)
parser.add_argument("--memory-gib", type=float)
parser.add_argument("--cpu-seconds", type=int)
args = parser.parse_args()
limit_resources(args.memory_gib, args.cpu_seconds)
grade_here(args.number, args.runs_in, args.path, args.solution, args.check_seconds)
