"""Action-list parsing and grid helpers shared by the grid puzzles."""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from verl_mas.env.replies import MAX_ANSWER_CHARS
from verl_mas_envs.puzzles.grid import MAX_ACTIONS, bfs_distances, parse_actions


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Actions: U R R D", "URRD"),
        ("actions: u r r d", "URRD"),
        ('["U", "R", "D"]', "URD"),
        ("up, up, left", "UUL"),
        ("UP DOWN Left right", "UDLR"),
        ("<answer>DDLR</answer>", "DDLR"),
        ("<answer> Actions: [\"L\", 'U'] </answer>", "LU"),
        ("I move up first, then right.\nActions: up right", "UR"),
        ("**Actions:** U, R", "UR"),
        ("**Actions**: U R", "UR"),  # emphasis with the colon outside it, as chat models write
        ("Sure! Here are the moves:\n\n*Moves*: D L\n\nThis reaches the goal.", "DL"),
        ("Actions:\nU R", "UR"),
        ('Actions: [\n  "U",\n  "R"\n]', "UR"),
        ("Actions: U -> R -> D", "URD"),
        ("Moves: go up then left", "UL"),
        ("→ → ↓ ←", "RRDL"),
        ("Actions: U\nOn second thought...\nFinal answer: R R", "RR"),
        ('I considered ["L"] but no.\nActions: U', "U"),
        ("The shortest route is below.\n['D', 'D']", "DD"),
        ("<think>Actions: L L</think>Actions: R", "R"),
        ("reasoning done</think>\nActions: D", "D"),
        ("```\nU R\n```", "UR"),
    ],
)
def test_parse_actions_reads_formats(text: str, expected: str) -> None:
    assert parse_actions(text) == tuple(expected)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   \n\t",
        "hello world",
        "That's right.",  # prose is never guessed at
        "Actions:",
        "Actions: []",
        "Actions: move up 3 times",
        "R 3",
        "Actions: ur",  # lowercase runs are not letter lists
        "Ｕ Ｒ",  # full-width letters
        "Actions: 上 右",
        "Actions: U\u200bR",  # zero-width space
        "<think>Actions: L L",  # unclosed reasoning
        "Actions: U R [note]",  # the bracketed part is not a move list
        "Actions: north east",
        "\x00\x01\x02",
    ],
)
def test_parse_actions_rejects_malformed(text: str) -> None:
    assert parse_actions(text) is None


def test_parse_actions_caps_length_and_stays_fast_on_huge_text() -> None:
    assert parse_actions("Actions: " + "U" * MAX_ACTIONS) == ("U",) * MAX_ACTIONS
    assert parse_actions("Actions: " + "U" * (MAX_ACTIONS + 1)) is None
    started = time.thread_time()  # CPU time: other load on the machine does not count
    assert parse_actions("U " * 1_000_000) is None
    assert parse_actions("x" * 2_000_000) is None
    assert parse_actions("Actions: " + "é" * 1_000_000) is None
    assert parse_actions("[" * 100_000 + "]" * 100_000) is None
    # Each took seconds with a lazy <answer>(.*?)</answer> scan from every opening tag (quadratic).
    assert parse_actions("<answer>" * 100_000) is None
    assert parse_actions("<answer>" * 100_000 + "Actions: U</answer>") == ("U",)
    assert parse_actions("Actions: " + "final " + " " * 100_000) is None
    assert time.thread_time() - started < 5.0


def test_only_the_end_of_a_long_reply_is_read() -> None:
    filler = "x" * MAX_ANSWER_CHARS
    assert parse_actions(filler + "\nActions: R") == ("R",)
    assert parse_actions("Actions: R\n" + filler) is None  # the moves are not in the last MAX_ANSWER_CHARS
    assert parse_actions("<think>" + "y" * 10 * MAX_ANSWER_CHARS + "</think>Actions: D") == ("D",)


def test_reasoning_never_counts_even_after_characters_that_lengthen_when_lowered() -> None:
    # 'İ'.lower() is two characters: positions found in text.lower() used to cut the reply 20 characters late
    assert parse_actions("İ" * 20 + "Actions: R\n<think>\nActions: D D D D") is None  # was ("D", "D")
    assert parse_actions("İ" * 20 + "\nActions: R\n<think>\nActions: D D D D") == ("R",)
    assert parse_actions("İ" * 20 + "<think>\nActions: D D D D") is None
    assert parse_actions("<think>İİİ</think>İ Actions: L") == ("L",)


def test_bfs_distances_hand_computed() -> None:
    walls = {(0, 1), (1, 1)}
    distances = bfs_distances(3, 3, (0, 0), lambda cell: cell not in walls)
    assert distances == ((0, -1, 6), (1, -1, 5), (2, 3, 4))


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_parse_actions_never_raises(text: str) -> None:
    actions = parse_actions(text)
    assert actions is None or (0 < len(actions) <= MAX_ACTIONS and set(actions) <= set("UDLR"))
