"""research.plan_path_chance: replies that ignore the board, scored by the env's rules, on hand-built boards and
against the regime study's copy baseline played through the turn protocol."""

from __future__ import annotations

import json

from research.plan_path_chance import chance, figures
from research.smollm2_regime import regime
from verl_mas.env import make_env
from verl_mas_envs.puzzles.plan_path import PlanPathBoard


def loaded(text: str):
    env = make_env("plan_path", size=3, tool_mode="compact")
    env.load(PlanPathBoard.from_text(text))
    return env


def test_a_fixed_reply_solves_by_the_rules_in_the_turns_it_has():
    env = loaded("A.G\n...\n#..")
    assert chance.solves(env, lambda: ["R", "R"], turns=1)
    assert not chance.solves(env, lambda: ["R"], turns=1) and chance.solves(env, lambda: ["R"], turns=2)
    assert not chance.solves(env, lambda: ["U", "R", "R"], turns=2)  # off the grid: the list stops at once, twice
    # an illegal move keeps the moves before it: R, then D into the wall stops the list at (0, 1); the next turn's R
    # reaches G
    walled = loaded("A.G\n.#.\n...")
    assert not chance.solves(walled, lambda: ["R", "D", "R"], turns=1)
    assert chance.solves(walled, lambda: ["R", "D", "R"], turns=2)


def test_every_list_is_each_list_of_one_to_six_moves_shortest_first():
    lists = chance.every_list()
    assert len(lists) == sum(4**n for n in range(1, 7)) == len(set(lists))
    assert lists[0] == ("U",) and [len(m) for m in lists] == sorted(len(m) for m in lists)


def test_the_example_reading_equals_the_copy_baseline_played_through_the_turn_protocol():
    row = chance.setting(4, 2, 64)  # the regime study's 64 boards, the first 64 of this study's
    assert row["example_success"] == regime.copy_baseline("team_zero_shot_example")["success"]
    assert row["best_fixed_success"] >= row["example_success"]  # the example's list is among those searched
    assert 0.0 < row["random_success"] < row["best_fixed_success"]


def test_the_figures_from_a_hand_made_result(tmp_path, monkeypatch):
    monkeypatch.setattr(figures, "DATA", tmp_path)
    assert figures.tables() == {"chance": "Not run yet.", "headline": "Not run yet."}
    rows = [
        {"size": size, "turns": turns, "boards": 100, "example": "U L", "example_success": 0.25,
         "best_fixed": "R", "best_fixed_success": 0.5, "random_success": 0.1 / size}
        for size in (4, 6) for turns in (1, 2)
    ]  # fmt: skip
    (tmp_path / figures.RESULT_FILE).write_text(json.dumps({"date": "d", "command": "c", "rows": rows}))
    assert "| 4x4 | 1 | `U L`: 0.250 (0.043) | `R`: 0.500 | 0.025 (0.016) |" in figures.chance_table()
    assert (
        figures.headline()
        == "4x4 in 2 turns: random 0.025, best fixed 0.500; 6x6 in 1 turn: random 0.017, best fixed 0.500"
    )
