"""The counts a page's code states: each whole number in it, with the names the code binds it
to, so that a count in the prose ("a 10-token prompt", "12 blocks") is witnessed only by a
number the code uses as that kind of count.

A number is bound to a name when it is

- in a keyword's value (``num_gpu_blocks=12``), a shell flag's (``--num-gpu-blocks 12``) or
  a dictionary's under a name (``{"num_hidden_layers": 30}``);
- in what is assigned to a name (``seq_lens = torch.tensor([10, 6])``; element by element
  in ``a, b = 8192, 100``);
- in a positional argument: the name of the parameter at its place in the example's own
  function of that name, or else the project's functions, methods and classes of that name
  (``bm.allocate(0, 10)``: ``BlockManager.allocate(seq_id, num_tokens)``);
- in one side of a comparison: the other side's names (``assert len(table.blocks) == 6``).

The same number as a sequence id, a loop's bound, an index, a comment or a diagram's label is
bound to nothing: it says nothing about what the prose counts,
and a wrong count that happened to equal it passed.
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

ROOT = Path(__file__).parents[1]
PACKAGES = ("minipaged", "cuda_kernels", "tui")

# The words of a name that say a count of each kind: a word of the name (split at "_", "-"
# and ".") that starts with one of these; ``n`` (``SamplingParams.n``) only as a whole word,
# and a block's or a page's size (B tokens) only as the whole name.
SAYS = {
    "block": ("block",),
    "slot": ("slot", "capacity"),
    "token": ("token", "len", "context"),
    "sequence": ("seq", "beam"),
    "request": ("request", "prompt"),
    "sample": ("sample",),
    "step": ("step",),
    "layer": ("layer",),
    "head": ("head",),
    "thread": ("thread",),
    "round": ("round",),
    "partition": ("partition",),
}
WHOLE_WORDS = {"sequence": {"n"}, "sample": {"n"}}
WHOLE_NAMES = {"token": {"block_size", "page_size", "b"}}
SINGULAR = {"seq", *(kind for kind in SAYS)}
"""A name that is one of these words alone holds one thing's id or index (``allocate(seq,
num_tokens)``, ``kv_scale[layer]``), not a count."""


def kind_of(noun: str) -> str:
    """The kind a count's noun names: "block" for "blocks", "token" for "10-token"."""
    return next(kind for kind in SAYS if kind in noun.lower())


def says(name: str, kind: str) -> bool:
    """Whether ``name`` (an identifier, a flag, an expression's text) names a count of
    ``kind``."""
    words = [w for w in re.split(r"[\W_]+", name.lower()) if w]
    if words and (words[-1] in ("id", "ids") or (len(words) == 1 and words[0] in SINGULAR)):
        return False  # seq, block, seq_id: which one, not how many
    return name.lower() in WHOLE_NAMES.get(kind, ()) or any(
        w.startswith(SAYS[kind]) or w in WHOLE_WORDS.get(kind, ()) for w in words
    )


@functools.cache
def parameters() -> dict[str, list[list[str]]]:
    """For each function, method and class name in the project's packages, the parameter
    names of each definition of it (``self`` and ``cls`` dropped; a class's ``__init__``, or
    a dataclass's fields in order)."""
    found: dict[str, list[list[str]]] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    names = [a.arg for a in node.args.posonlyargs + node.args.args]
                    found.setdefault(node.name, []).append(
                        [n for n in names if n not in ("self", "cls")]
                    )
                elif isinstance(node, ast.ClassDef):
                    init = [s for s in node.body if getattr(s, "name", "") == "__init__"]
                    fields = [
                        s.target.id
                        for s in node.body
                        if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)
                    ]
                    names = [a.arg for a in init[0].args.args[1:]] if init else fields
                    found.setdefault(node.name, []).append(names)
    return found


def _callee(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def _whole_numbers(node: ast.AST) -> set[int]:
    """Every whole number written in the expression ``node`` (``[10, 6]``, ``100 + 25``)."""
    return {n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and type(n.value) is int}


def python_bindings(source: str) -> set[tuple[int, str]]:
    """``(number, name)`` for each whole number ``source`` binds to a name; nothing for code
    that does not parse on its own."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    bound: set[tuple[int, str]] = set()
    local = {  # the example's own functions: trace_bytes(8192) binds 8192 to its parameter
        node.name: [[a.arg for a in node.args.args]]
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef)
    }

    def bind(value: ast.AST, name: str) -> None:
        bound.update((number, name) for number in _whole_numbers(value))

    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg:
            bind(node.value, node.arg)
        elif isinstance(node, ast.Dict):  # a config's {"num_hidden_layers": 30}
            for key, value in zip(node.keys, node.values, strict=True):
                if isinstance(key, ast.Constant) and isinstance(key.value, str):
                    bind(value, key.value)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple):
                    for name, value in zip(target.elts, node.value.elts, strict=False):
                        bind(value, ast.unparse(name))
                else:
                    bind(node.value, ast.unparse(target))
        elif isinstance(node, ast.Call):
            for place, arg in enumerate(node.args):
                for names in local.get(_callee(node)) or parameters().get(_callee(node), []):
                    if place < len(names):
                        bind(arg, names[place])
        elif isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            for i, side in enumerate(sides):
                bind(side, " ".join(ast.unparse(s) for j, s in enumerate(sides) if j != i))
    return bound


SHELL_FLAG = re.compile(r"(--[\w-]+)(?:=|\s+)(\d+)\b")


def shell_bindings(source: str) -> set[tuple[int, str]]:
    """``(number, flag)`` for each ``--flag N`` or ``--flag=N`` of a command line."""
    return {(int(number), flag) for flag, number in SHELL_FLAG.findall(source)}


def bindings(language: str, source: str) -> set[tuple[int, str]]:
    """What a fence of ``language`` binds each of its whole numbers to."""
    if language == "python":
        return python_bindings(source)
    if language in ("bash", "console"):
        return shell_bindings(source)
    return set()  # a diagram's labels, a table of text: prose in another form


def witnessed(number: int, noun: str, bound: set[tuple[int, str]]) -> bool:
    """Whether the code's ``bound`` numbers hold ``number`` as a count of what ``noun``
    names."""
    kind = kind_of(noun)
    return any(value == number and says(name, kind) for value, name in bound)
