"""A grading child holds no library function it does not hand over (``Exercise.handed_over``):
after ``delegation.guard``, for every exercise, no live function, cell or container anywhere in
the process carries the code of a graded function or answer that is not handed over, nor does
the hooks' own table of codes; and those handed over are found where the hook keeps them, so
the search can fail. Student code reading the child's memory with ``ctypes`` (the corpus's
``the-library-in-memory``), which no audit hook sees, then finds nothing else of the
solution: exercise 01's ``logical_block`` passed that way, found in the hook's closure, and
``block_offset`` rebuilt from the code ``provenance`` kept of the library's file."""

from __future__ import annotations

import json
import subprocess
import sys

from minipaged.grader.exercises import EXERCISES

SEARCH = r"""
import gc, json, os, sys, tempfile
from pathlib import Path
from types import CellType, CodeType, FunctionType

from minipaged.grader import delegation
from minipaged.grader.exercises import EXERCISES
from minipaged.grader.provenance import walk
from minipaged.grader.runtime_code import watch
from minipaged.grader.similarity import Graded


def key(code):
    return (code.co_filename, code.co_qualname, code.co_firstlineno)


def contents(cell):
    try:
        return [cell.cell_contents]
    except ValueError:  # a cell not filled yet
        return []


def carried():
    # every code a live object carries: a function's, a cell's, an item of a container's
    for held in gc.get_objects():
        kind = type(held)
        if kind is FunctionType:
            inner = [held.__code__]
        elif kind is CellType:
            inner = contents(held)
        elif kind in (tuple, list, set, frozenset):
            inner = list(held)
        elif kind is dict:
            inner = [*held, *held.values()]
        else:
            continue
        for code in inner:
            if type(code) is CodeType and code.co_filename in files:
                yield from walk(code)


for ex in EXERCISES.values():  # imported once, before the forks
    for name in ex.graded + ex.answers:
        ex.lookup(name)
def guarded(ex, keeping):  # in a fork: guard changes the process for good
    names = ex.graded + ex.answers
    codes = {n: [key(c) for c in delegation._codes(delegation._original(ex, n))] for n in names}
    global files
    files = {file for n in names for file, _, _ in codes[n]}
    hooks = []  # held here, not installed: the hooks refuse gc's searches
    sys.addaudithook = hooks.append
    folder = Path(tempfile.mkdtemp())
    delegation.guard(ex, folder, keeping=keeping)
    watch(folder, lambda *told: None)  # the child's other guard, as it starts
    gc.collect()
    found = {key(c) for c in carried()}
    shapes = sum(type(o) is Graded for o in gc.get_objects())  # the shape of a graded function
    return {"held": sorted(n for n in names if found.intersection(codes[n])), "shapes": shapes}


pipes = {}
# Each child of an exercise: the one for its criteria on the library's (keeping what it hands
# over), and the one for the others (keeping nothing)
runs = [(ex, kept) for ex in EXERCISES.values() for kept in {tuple(ex.handed_over), ()}]
for ex, keeping in runs:  # two cores: the forks run side by side
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            answer = guarded(ex, keeping)
        except BaseException as error:
            answer = {"error": f"{type(error).__name__}: {error}"}
        os.write(write, json.dumps(answer).encode())
        os._exit(0)
    os.close(write)
    pipes[f"{ex.number} {len(keeping)}"] = (pid, read)
results = {}
for run, (pid, read) in pipes.items():
    with os.fdopen(read) as answer:
        results[run] = json.loads(answer.read() or '{"error": "no answer"}')
    os.waitpid(pid, 0)
print(json.dumps(results))
"""
"""Each exercise guarded in a fork of one process that imported the library once, and the
graded functions and answers whose code is still carried by something alive, by name."""


def test_a_grading_child_keeps_only_what_it_hands_over():
    done = subprocess.run([sys.executable, "-c", SEARCH], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout.splitlines()[-1])
    kept = {ex.number: len(ex.handed_over) for ex in EXERCISES.values()}
    assert set(results) == {f"{n} {k}" for n, k in kept.items()} | {f"{n} 0" for n in kept}
    for run, result in results.items():
        number, keeping = map(int, run.split())
        assert "error" not in result, (run, result)
        assert result["held"] == sorted(EXERCISES[number].handed_over if keeping else ()), run
        assert result["shapes"] == 0, run  # the copy finder's shapes are the grader's


def test_what_a_grading_child_hands_over_is_graded_says_why_and_serves_some_criterion():
    """The criteria graded on the library's (``Criterion.on_the_library``) are those a child
    that hands functions over runs: an exercise has both, or neither."""
    for ex in EXERCISES.values():
        assert set(ex.handed_over) <= set(ex.graded + ex.answers), ex.number
        assert all(len(why) > 40 for why in ex.handed_over.values()), ex.number
        on_the_library = [c.name for c in ex.criteria() if c.on_the_library]
        assert bool(on_the_library) == bool(ex.handed_over), (ex.number, on_the_library)


HOLDERS = """
import dataclasses, functools

def graded(*args):
    return "library"

alias = graded

def with_default(f=graded):
    return f()

def with_keyword_default(*, f=graded):
    return f()

def _closing():
    held = graded
    return lambda: held()

closure = _closing()
wrapper = functools.wraps(graded)(lambda *args: graded(*args))
cached = functools.lru_cache(graded)
partial = functools.partial(graded)

class Other:
    method = graded
    static = staticmethod(graded)
    getter = property(graded)

@dataclasses.dataclass(frozen=True)
class Record:
    function: object

TABLE = (Record(graded),)
REGISTRY = {"graded": graded}
LISTED = [graded]

class Registry:
    def __init__(self):
        self.handler = graded

REGISTERED = Registry()

class Dispatcher:  # what a Numba dispatcher holds: the Python function it compiles
    def __init__(self, function):
        self.py_func = function

    def __call__(self, *args):
        return self.py_func(*args)

dispatcher = Dispatcher(graded)
"""
"""A library module holding its graded function every way the library may: an alias, default
arguments, a closure, wrappers (``functools.wraps``, ``lru_cache``, ``partial``), another
class's attributes (a method, a ``staticmethod``, a ``property``), a frozen record in a table,
a registry's dict, list and object, a dispatcher's ``py_func``."""


def test_every_holder_of_a_replaced_function_gets_its_stub_and_it_is_garbage(monkeypatch):
    import types
    import weakref

    from minipaged.grader import holders

    module = types.ModuleType("minipaged.holders_of_a_graded_function")
    monkeypatch.setitem(sys.modules, module.__name__, module)
    exec(compile(HOLDERS, "<holders>", "exec"), vars(module))
    graded, gone = module.graded, weakref.ref(module.graded)

    def stub(*args):
        return "stub"

    module.graded = stub  # as guard replaces the function where the exercise names it
    holders.replace_aliases({id(graded): stub})
    del graded
    holders.check_dropped([("minipaged.holders_of_a_graded_function:graded", gone)])
    assert gone() is None
    called = {
        "alias": module.alias(),
        "default": module.with_default(),
        "keyword default": module.with_keyword_default(),
        "closure": module.closure(),
        "wraps": module.wrapper(),
        "lru_cache": module.cached(),
        "partial": module.partial(),
        "method": module.Other.method(),
        "staticmethod": module.Other.static(),
        "property": module.Other().getter,
        "record": module.TABLE[0].function(),
        "dict": module.REGISTRY["graded"](),
        "list": module.LISTED[0](),
        "object": module.REGISTERED.handler(),
        "py_func": module.dispatcher(),
    }
    assert called == dict.fromkeys(called, "stub")
