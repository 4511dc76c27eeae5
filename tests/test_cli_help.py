"""Every ``--help`` of every subcommand states each option's default, once, or none when there
is none: argparse's ``(default: ...)`` is added only where the help does not say it in
words already (``minipaged.arguments.DefaultsFormatter``)."""

from __future__ import annotations

import argparse
import re

from minipaged import train
from minipaged.cli import build_parser

DEFAULT = re.compile(r"\(default\b")


def parsers(parser: argparse.ArgumentParser):
    """``parser`` and every subcommand's parser under it, depth first."""
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from parsers(sub)


def shown_helps():
    """Each option's help as ``--help`` prints it, with the parser's name: every subcommand of
    ``minipaged``, and ``python -m minipaged.train``."""
    for parser in [*parsers(build_parser()), train.build_parser()]:
        formatter = parser._get_formatter()
        for action in parser._actions:
            if action.help != argparse.SUPPRESS:  # an option without help shows none: ""
                yield parser.prog, action, formatter._expand_help(action) if action.help else ""


def test_every_option_states_its_default_at_most_once_and_never_an_empty_one():
    helps = list(shown_helps())
    assert len({prog for prog, _, _ in helps}) >= 10  # every subcommand was walked
    for prog, action, text in helps:
        where = f"{prog} {'/'.join(action.option_strings) or action.dest}: {text}"
        assert len(DEFAULT.findall(text)) <= 1, where
        assert not re.search(r"\(default: (None|False)\)", text), where


def test_every_option_with_a_default_states_it():
    """Each option that takes a value and has one when not typed says it in its help:
    argparse's ``(default: X)``, or words of its own in ``(default ...)``."""
    options = [
        (prog, action, text)
        for prog, action, text in shown_helps()
        if action.option_strings
        and action.nargs != 0  # a flag: its default is not to be given
        and action.default not in (None, argparse.SUPPRESS)
    ]
    assert len(options) >= 40  # the engine's generated flags among them
    silent = {
        f"{prog} {action.option_strings[-1]}": action.default
        for prog, action, text in options
        if not DEFAULT.search(text)
    }
    assert not silent, silent  # a default of 0 too: 0 == False, but it is a default


def test_check_help_says_the_memory_and_time_defaults_once():
    helps = {a.dest: text for prog, a, text in shown_helps() if prog.endswith("exercises check")}
    assert helps["memory_limit"].endswith("(default: 8, or the machine's memory if it has less)")
    assert helps["time_limit"].endswith("(default: 600.0)")
    assert "default" not in helps["solution"]
