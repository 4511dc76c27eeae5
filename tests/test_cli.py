from minipaged import cli


def test_demo_narrates_fork_copy_on_write_and_swap_with_invariants_holding(capsys):
    assert cli.main(["demo"]) == 0
    out = capsys.readouterr().out
    assert "forks from seq 0" in out
    assert "copy-on-write of 2 token(s)" in out
    assert "swaps out to host memory" in out
    assert "swaps back in" in out
    assert "BROKEN" not in out
    assert out.count("invariants: all hold") == 8


def test_unknown_subcommand_is_a_usage_error(capsys):
    assert cli.main(["frobnicate"]) == 2
    assert "invalid choice: 'frobnicate'" in capsys.readouterr().err


def test_demo_stops_after_the_steps_asked_for(capsys):
    assert cli.main(["demo", "--steps", "2"]) == 0
    out = capsys.readouterr().out
    assert "step 2" in out and "step 3" not in out


def test_demo_pauses_between_steps_and_stops_when_asked(capsys):
    from minipaged import walkthrough

    answers = iter([True, False])
    walkthrough.run(pause=lambda: next(answers))
    out = capsys.readouterr().out
    assert "step 2" in out and "step 3" not in out


def test_every_option_of_every_subcommand_shows_its_default():
    import argparse

    parser = cli.build_parser()
    pending = [parser]
    while pending:
        current = pending.pop()
        assert issubclass(current.formatter_class, argparse.ArgumentDefaultsHelpFormatter), (
            current.prog
        )
        for action in current._actions:
            if isinstance(action, argparse._SubParsersAction):
                pending.extend(action.choices.values())
            elif action.option_strings and action.help != argparse.SUPPRESS:
                assert action.help, f"{current.prog} {action.option_strings} has no help"
