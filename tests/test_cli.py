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
