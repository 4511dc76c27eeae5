"""``python -m minipaged.grader N --runs-in simulator|gpu [--path DIR | --solution]``: grade the
criteria of exercise N that run in that environment, in this process, and print the report as
one line of JSON. The grader starts this in a fresh process with the environment set."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from minipaged.grader.grading import grade_here

parser = argparse.ArgumentParser(prog="python -m minipaged.grader")
parser.add_argument("number", type=int)
parser.add_argument("--runs-in", choices=["process", "simulator", "gpu"], required=True)
parser.add_argument("--path", type=Path)
parser.add_argument("--solution", action="store_true")
args = parser.parse_args()
report = grade_here(args.number, args.runs_in, args.path, args.solution)
print(json.dumps(report.to_dict()))
