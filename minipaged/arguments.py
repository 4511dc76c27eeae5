"""What the command line accepts: a parser whose usage errors are one line, and value types
that refuse a bad number where it is typed, naming the flag, the value and the range.

Every subcommand's parser is a ``Parser`` (``add_parser`` makes the parent's class), so every
``--help`` shows every default and every usage error exits with status 2 in one line.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NoReturn

from minipaged.config import EngineConfig, check_setting, settings_of
from minipaged.python_numbers import MAX_COUNT
from minipaged.sampling_rules import check_sampling_value
from minipaged.typed_numbers import integer_between, read_integer, read_real

USAGE_ERROR = 2
"""Exit status for bad usage: a flag, value or combination the command does not accept."""

FAILURE = 1
"""Exit status for a failure: the command was well formed but could not do its work (a missing
or corrupt file, a device that is not there, a model that does not load)."""

INTERRUPTED = 130
"""Exit status after Ctrl-C (128 + SIGINT), as shells report it."""


class DefaultsFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Ends an option's help with ``(default: X)``, once: not where the help states its
    default itself (``(default: the starter folder)``, in words argparse cannot know), and not
    where there is none to show (``None``, or a flag's ``False``). By identity: ``0 == False``,
    and a count or seed whose default is 0 has one to show."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if re.search(r"\(default\b", text) or action.default is None or action.default is False:
            return text
        return super()._get_help_string(action)


class Parser(argparse.ArgumentParser):
    """``argparse.ArgumentParser`` that shows defaults in ``--help`` (``DefaultsFormatter``)
    and reports a usage error as one line, ``minipaged generate: argument --n: ...; see
    ...``, with status 2."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", DefaultsFormatter)
        super().__init__(*args, **kwargs)

    def parse_known_args(self, args=None, namespace=None):
        self._typed: set[argparse.Action] = set()
        parsed, rest = super().parse_known_args(args, namespace)
        leaf = not any(isinstance(a, argparse._SubParsersAction) for a in self._actions)
        if rest and leaf:  # said here, by the subcommand they were typed to, not by the root
            self.error(f"unrecognized arguments: {' '.join(rest)}")
        self._check_pairs(parsed)
        # What was typed, for a check that needs the values too (a subcommand's, kept)
        typed = {action.dest for action in self._typed}
        parsed.typed = frozenset(typed | getattr(parsed, "typed", frozenset()))
        return parsed, rest

    def _get_values(self, action: argparse.Action, arg_strings: list[str]):
        # argparse converts the words of every option typed on the command line here, and
        # only those: a default is never converted here (so its value cannot be confused with
        # one typed, `--temperature 0.8` beside `--beam-width` included)
        self._typed.add(action)
        return super()._get_values(action, arg_strings)

    def _check_pairs(self, parsed: argparse.Namespace) -> None:
        """Refuse an option typed without the one it ``requires``, or beside one it
        ``excludes``: silently ignoring either would run something other than what was
        asked. An option counts as given when it is typed, even with its default value."""
        for action in self._actions:
            if not action.option_strings or action not in self._typed:
                continue
            flag = action.option_strings[-1]
            needed = getattr(action, "required_option", None)
            if needed is not None and needed not in self._typed:
                what = needed.metavar or needed.dest.upper() if needed.nargs != 0 else ""
                self.error(
                    f"{flag} is for {needed.option_strings[-1]}: give "
                    f"{' '.join((needed.option_strings[-1], what)).strip()}, or leave {flag} out"
                )
            for other, why, when in getattr(action, "excluded_options", ()):
                value = getattr(parsed, other.dest, None)
                if other in self._typed and (when is None or when(value)):
                    words = other.option_strings[-1] + ("" if when is None else f" {value}")
                    self.error(f"{flag} and {words} cannot go together ({why}): leave one out")

    def error(self, message: str) -> NoReturn:
        self.exit(USAGE_ERROR, f"{self.prog}: {one_line(message)}; see `{self.prog} --help`\n")


@contextlib.contextmanager
def naming(flag: str) -> Iterator[None]:
    """Start the message of a ``ValueError`` or ``OSError`` raised in the block with ``flag``
    (``--trace run.jsonl does not exist: ...``) when it does not name it already: what a flag
    names is often read after parsing, by code that names the path but not the flag."""
    try:
        yield
    except (OSError, ValueError) as error:
        said = error.args[0] if len(error.args) == 1 else None
        if isinstance(said, str) and flag not in said:
            error.args = (f"{flag} {said}",)
        raise


def requires(action: argparse.Action, needed: argparse.Action) -> None:
    """Mark ``action`` (a flag ``add_argument`` returned) as meaningful only beside ``needed``:
    the parser refuses it alone (``Parser._check_pairs``)."""
    action.required_option = needed


def excludes(
    action: argparse.Action,
    other: argparse.Action,
    why: str,
    when: Callable[[object], bool] | None = None,
) -> None:
    """Mark ``action`` and ``other`` as contradicting each other, for the reason ``why``: the
    parser refuses them together (``Parser._check_pairs``); with ``when``, only where
    ``when(value of other)`` holds (``--top-k`` beside ``--temperature 0``, not 0.8)."""
    excluded = (*getattr(action, "excluded_options", ()), (other, why, when))
    action.excluded_options = excluded


def speculation_needs_one_sequence(
    parser: argparse.ArgumentParser, n: argparse.Action, beam: argparse.Action
) -> None:
    """Refuse ``--speculative-config`` beside ``--beam-width``, or ``--n`` above 1: speculative
    decoding drafts only for a request with one sequence (``Speculator``), and every request of
    one command line shares those flags, so nothing would be drafted, without a word."""
    speculative = next(a for a in parser._actions if a.dest == "speculative")
    why = "speculative decoding drafts only for a request of one sequence"
    excludes(speculative, beam, why)
    excludes(speculative, n, why, when=lambda value: value > 1)


def integer(low: int, high: int | None = None) -> Callable[[str], int]:
    """An argparse type for an integer in [low, high]; ``high`` None is ``MAX_COUNT``, the
    largest count any setting holds, so no typed count overflows what it sizes. Its
    ``bounds`` attribute says ``(low, high)``."""
    high = MAX_COUNT if high is None else high

    def parse(text: str) -> int:
        try:
            return integer_between(text, low, high)  # the one rule for a typed integer
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None

    parse.__name__ = "integer"
    parse.bounds = (low, high)  # read by the command-line corpus, which tries each side's neighbour
    return parse


def real(
    low: float, high: float | None = None, *, above: bool = False, below: bool = False, inf=""
) -> Callable[[str], float]:
    """An argparse type for a finite number in [low, high] (``above``: low excluded;
    ``below``: high excluded): ``inf`` and ``nan`` are refused, since no size, probability or
    temperature is either; with ``inf`` (what it means: ``"for no limit"``), ``inf`` is taken,
    and said so in every refusal. Its ``bounds`` attribute says ``(low, high)``."""
    opening = "above" if above else "at least"
    closing = "below" if below else "at most"
    bounds = f"{opening} {low:g}" + (f" and {closing} {high:g}" if high is not None else "")
    or_inf = f" or inf {inf}" if inf else ""

    def parse(text: str) -> float:
        try:
            value = read_real(text)  # the one rule for a typed number
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number{or_inf}, got {text!r}") from None
        if not math.isfinite(value) and not (inf and value == math.inf):
            finite = f"a finite number ({bounds}){or_inf}"
            raise argparse.ArgumentTypeError(f"must be {finite}, got {text!r}")
        too_high = high is not None and (value > high or (below and value == high))
        if value < low or (above and value == low) or too_high:
            raise argparse.ArgumentTypeError(f"must be {bounds}{or_inf}, got {value:g}")
        return value

    parse.__name__ = "number"
    parse.bounds = (low, high)
    return parse


def text(what: str) -> Callable[[str], str]:
    """An argparse type for a non-empty string without a NUL byte (a path, a model name)."""

    def parse(value: str) -> str:
        if not value.strip():
            raise argparse.ArgumentTypeError(f"must name {what}, got an empty string")
        if "\x00" in value:
            raise argparse.ArgumentTypeError(
                f"must name {what}, got {value[:60]!r}, which holds a NUL byte"
            )
        return value

    parse.__name__ = "text"
    return parse


def named_path(what: str) -> Callable[[str], Path]:
    """An argparse type for a path (``text``'s rules, as a ``Path``)."""
    nonempty = text(what)

    def parse(value: str) -> Path:
        return Path(nonempty(value))

    parse.__name__ = "path"
    return parse


def ruled_number(
    kind: type[int] | type[float], check: Callable[[int | float], object]
) -> Callable[[str], int | float]:
    """An argparse type that reads the typed word as ``kind`` and refuses it where it is typed
    by ``check``, a library rule that raises ``ValueError``: the command line and the library
    then accept the same values, in the same words."""
    expected = "an integer" if kind is int else "a number"

    def parse(word: str) -> int | float:
        try:
            value = read_integer(word) if kind is int else read_real(word)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {expected}, got {word!r}") from None
        try:
            check(value)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None
        return value

    parse.__name__ = "integer" if kind is int else "number"
    return parse


def sampling_value(name: str, kind: type[int] | type[float]) -> Callable[[str], int | float]:
    """An argparse type for the ``SamplingParams`` field ``name``, by the field's own rule
    (``sampling_rules.check_sampling_value``): ``--temperature 0.001`` is refused as
    ``SamplingParams(temperature=0.001)`` is."""
    return ruled_number(kind, lambda value: check_sampling_value(name, value))


def check_best_of_beams(n: int, beam_width: int, n_typed: bool) -> None:
    """Refuse what ``--n N`` beside ``--beam-width K`` (K >= 1) asks for that beam search
    could not give. The pair is the N best of the K beams, as ``SamplingParams`` reads it: N
    above K is refused, and so is ``--n 1`` typed (``n_typed``) beside K above 1, which
    ``SamplingParams`` reads as every beam (leaving ``--n`` out asks for all K). ``generate``
    and ``simulate`` both read the pair so."""
    if not n_typed:
        return
    if n > beam_width:
        raise ValueError(
            f"--n {n} asks for the {n} best of the beams of --beam-width {beam_width}, more "
            f"than there are: lower --n to at most {beam_width} or raise --beam-width to "
            f"at least {n}"
        )
    if n == 1 < beam_width:
        raise ValueError(
            f"--n 1 beside --beam-width {beam_width} would return all {beam_width} beams "
            f"(SamplingParams reads n=1 as every beam), not the best one: leave --n out "
            f"for all {beam_width}, or give --n from 2 to {beam_width} for that many best"
        )


def check_sequences_fit(args: argparse.Namespace, max_num_seqs: int) -> None:
    """Refuse, before any model loads, what ``--n`` and ``--beam-width`` ask for that the
    request could not give (``check_best_of_beams``). Either flag above ``--max-num-seqs`` is
    refused too: a request's sequences all run in one step's batch, so the engine would
    refuse it anyway (``LLMEngine.add_request``), after the load and in the library's words."""
    n, beam_width = args.n, args.beam_width
    if beam_width is not None:
        check_best_of_beams(n, beam_width, "n" in args.typed)
    flag, count = ("--beam-width", beam_width) if beam_width is not None else ("--n", n)
    if count > max_num_seqs:
        raise ValueError(
            f"{flag} {count:,} runs more sequences than one step's batch holds (--max-num-seqs "
            f"{max_num_seqs}); lower {flag} or raise --max-num-seqs"
        )


def setting_integer(name: str) -> Callable[[str], int]:
    """An argparse type for the integer ``EngineConfig`` field ``name``, within its bounds: a
    command that takes the setting outside the config (``bench --seed``) takes what the
    engine takes."""
    rule = settings_of()[name]
    return integer(int(rule.low or 0), rule.high and int(rule.high))


def setting_real(name: str) -> Callable[[str], float]:
    """An argparse type for the real ``EngineConfig`` field ``name`` (``watermark``), by the
    field's own rule (``config.check_setting``), its smallest positive value included."""
    return ruled_number(float, lambda value: check_setting(name, value))


def setting_text(name: str) -> Callable[[str], str]:
    """An argparse type for the text ``EngineConfig`` field ``name`` (``device``, say): refused
    where it is typed, by the field's own rule (``config.check_setting``), so a command that
    takes the setting outside the config (``bench --device``) checks it the same way."""
    nonempty = text(name.replace("_", " "))

    def parse(value: str) -> str:
        try:
            check_setting(name, nonempty(value))
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None
        return value

    parse.__name__ = "text"
    return parse


LONGEST_MESSAGE = 1000
"""Characters of an error line kept; a longer one (it echoes a 100 KB value) loses its middle."""


def one_line(message: str) -> str:
    """``message`` on one line, and only its start and end when very long: what failed, and
    the way out."""
    line = " ".join(message.splitlines())
    if len(line) > LONGEST_MESSAGE:
        half = LONGEST_MESSAGE // 2
        line = f"{line[:half]} [... {len(line) - 2 * half:,} characters ...] {line[-half:]}"
    return line


def say(command: str, message: str) -> None:
    """Print ``message`` as one line on stderr (``one_line``), prefixed by the command that
    failed."""
    prefix = f"minipaged {command}" if command else "minipaged"
    print(f"{prefix}: {one_line(message)}", file=sys.stderr)


def add_config_flags(parser: argparse.ArgumentParser, defaults: EngineConfig) -> None:
    """One flag per ``EngineConfig`` field that the command lines offer (``Setting.flag``),
    generated from the field: its name (``block_size`` is ``--block-size``), its type and
    bounds or choices, its help and, from ``defaults``, the default this command shows. A flag
    left out keeps ``defaults``' value (``config_from_flags``): only given flags land in the
    namespace, so a command can lay them over any config, a TUI scenario's included."""
    group = parser.add_argument_group("engine settings (minipaged.config.EngineConfig)")
    library = type(defaults)()  # the config class's own defaults
    for name, rule in settings_of().items():
        if not rule.flag:
            continue
        default = getattr(defaults, name)
        shown = rule.none if default is None else default
        if default != getattr(library, name):
            shown = f"{shown}; the library's: {getattr(library, name)}"
        kwargs: dict = {"dest": name, "default": argparse.SUPPRESS, "metavar": rule.metavar}
        if rule.kind is bool:
            kwargs = {"dest": name, "default": argparse.SUPPRESS, "action": "store_true"}
        elif rule.choices:
            kwargs["choices"], kwargs["metavar"] = rule.choices, None
        elif rule.kind is int:
            kwargs["type"] = setting_integer(name)
        elif rule.kind is float:
            kwargs["type"] = setting_real(name)
        else:
            kwargs["type"] = setting_text(name)
        said = "" if shown is False else f" (default: {shown})"  # a flag's False: it is off
        group.add_argument(_flag(name), help=rule.help + said, **kwargs)


def config_from_flags(args: argparse.Namespace, base: EngineConfig) -> EngineConfig:
    """``base`` with the engine flags ``args`` holds laid over it (``add_config_flags``)."""
    given = {name: getattr(args, name) for name in settings_of() if hasattr(args, name)}
    return base.replace(**given)


FIELD_VALUE = re.compile(r"\b([a-z][a-z0-9_]*)=(\S+)")
"""A field of a config as the library's errors name it: ``max_model_len=100000``."""


def in_flags(message: str, args: argparse.Namespace | None) -> str:
    """``message`` with each ``field=value`` of an ``EngineConfig`` field typed as a flag
    (``args`` holds only those: ``add_config_flags``) said as that flag (``--max-model-len
    100000``): the library's errors name its fields, where the user typed flags."""
    settings = settings_of()

    def flag(match: re.Match) -> str:
        name, value = match.groups()
        offered = name in settings and args is not None and hasattr(args, name)
        if not offered or settings[name].kind is bool:
            return match.group(0)
        return f"{_flag(name)} {value}"

    return FIELD_VALUE.sub(flag, message)


def _flag(name: str) -> str:
    """The flag of the ``EngineConfig`` field ``name``: ``--block-size`` for ``block_size``."""
    return settings_of()[name].flag_name or f"--{name.replace('_', '-')}"
