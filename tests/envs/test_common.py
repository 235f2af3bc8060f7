"""What the built-in environments share: the split-keeping board draw and the sandboxed tool program."""

from __future__ import annotations

import pytest

from verl_mas_envs.common import Unreadable, draw_board, run_tool_program


def test_draw_board_rejects_unknown_split() -> None:
    with pytest.raises(ValueError, match="split"):
        draw_board("x", 0, "test", lambda rng: "board", str)


def test_run_tool_program_reports_why_there_is_no_output() -> None:
    assert run_tool_program("print('U R')", "", 2.0) == "U R\n"
    assert run_tool_program("print(input()[::-1])", "abc\n", 2.0) == "cba\n"
    assert run_tool_program("print('\ud800')", "", 2.0) == Unreadable(
        "the program is not valid text (it holds a lone surrogate)"
    )
    assert run_tool_program("raise SystemExit(4)", "", 2.0) == Unreadable("the program exited with code 4")
