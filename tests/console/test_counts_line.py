"""counts_line: a stage's line names only the counts that happened."""

from zoorank.console import counts_line


def test_zero_counts_are_left_out_and_nothing_is_said_as_such():
    line = counts_line("score", [(3, "model(s) scored"), (0, "up to date"), (0, "ensemble(s)"),
                                 (1, "failed upstream")], "4.2 s")
    assert line == "score: 3 model(s) scored, 1 failed upstream; 4.2 s"
    assert counts_line("score", [(0, "model(s) scored")]) == "score: nothing to do"
