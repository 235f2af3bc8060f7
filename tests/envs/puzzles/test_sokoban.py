"""Sokoban: push rules, exact solution table and deadlocks, generation, rewards on hand-built boards, turns."""

from __future__ import annotations

import pytest

from grid_testkit import expert_program_moves, grid_task, start_boards_by_split
from verl_mas.env import Task, make_env
from verl_mas_envs.puzzles.grid import IllegalMove
from verl_mas_envs.puzzles.sokoban import EXPERT_PROGRAM, SokobanBoard, SokobanEnv, SokobanPosition

# Open 4x4 room. Optimal by hand: 2 pushes (down, right) and 3 walking moves, e.g. R D L D R = 5 moves.
ROOM = """
######
#@___#
#_$__#
#__._#
#____#
######
"""
# Goal in the left column: a box against that wall is still solvable, in the top-left corner it is not.
LEFT_GOAL = """
######
#@___#
#_$__#
#.___#
#____#
######
"""
ONE_PUSH = """
#####
#@$.#
#####
"""


def room_env(text: str = ROOM, tool_mode: str = "compact", max_turns: int = 5, **options: object) -> SokobanEnv:
    env = SokobanEnv(tool_mode=tool_mode, max_turns=max_turns, **options)
    env.load(SokobanBoard.from_text(text))
    return env


def task(seed: int, split: str = "train", **options: object) -> Task:
    return grid_task("sokoban", seed, split, **options)


def at(player: tuple[int, int], *boxes: tuple[int, int]) -> SokobanPosition:
    return SokobanPosition(player, tuple(sorted(boxes)))


def test_board_from_text() -> None:
    board = SokobanBoard.from_text(ROOM)
    assert board.start == at((1, 1), (2, 2)) and board.goals == ((3, 3),)
    assert len(board.floor) == 16 and (0, 0) not in board.floor
    assert board.render(board.start) == ROOM.strip()
    assert board.render(at((3, 3), (1, 2))) == "######\n#_$__#\n#____#\n#__+_#\n#____#\n######"
    assert board.render(at((1, 1), (3, 3))) == "######\n#@___#\n#____#\n#__*_#\n#____#\n######"


def test_push_rules() -> None:
    env = room_env()
    assert env.move(at((1, 1), (2, 2)), "R") == at((1, 2), (2, 2))  # walk
    assert env.move(at((1, 1), (2, 2)), "U") == IllegalMove("walks into a wall")
    assert env.move(at((1, 2), (2, 2)), "D") == at((2, 2), (3, 2))  # push
    assert env.move(at((3, 2), (4, 2)), "D") == IllegalMove("pushes a box into a wall")
    assert env.move(at((1, 1), (1, 2), (1, 3)), "R") == IllegalMove("pushes a box into another box")
    assert env.move(at((2, 1), (2, 2), (3, 3)), "R") == at((2, 2), (2, 3), (3, 3))  # one box moves, sorted again


def test_push_onto_goal_solves() -> None:
    env = room_env(ONE_PUSH)
    assert env.distance(env.board.start) == 1
    assert env.move(env.board.start, "R") == at((1, 2), (1, 3))
    result = env.step("plan", "Actions: R")
    assert result.done and env.success() and result.team_reward == 1.0 and result.local_reward == 1.0
    assert "*" in env.render(env.state.position)


def test_solution_table_hand_checked() -> None:
    env = room_env()
    assert env.distance(at((1, 1), (2, 2))) == 5
    assert env.distance(at((1, 2), (2, 2))) == 4
    assert env.distance(at((2, 2), (3, 2))) == 3  # after pushing down: L D R
    assert env.distance(at((1, 1), (3, 3))) == 0  # solved, wherever the player is
    assert env.distance(at((2, 2), (1, 2))) is None  # box on the top wall, goal not on it
    assert env.distance(at((1, 2), (1, 1))) is None  # box in a corner
    assert env.distance(at((3, 2), (4, 4))) is None
    assert env.optimal_actions(env.board.start) in (list("RDLDR"), list("DRURD"))


@pytest.mark.parametrize(
    ("text", "local", "valid"),
    [
        ("Actions: R D L D R", 1.0, True),
        ("Actions: D U R D L D R", 0.5 + 0.5 * 5 / 7, True),
        ("Actions: R", 0.5 * (5 - 4) / 5, True),
        ("Actions: L", -0.25, False),  # wall at once: nothing applied
        ("Actions: D D R U", -0.5, True),  # pushes the box onto the top wall: deadlock
        ("<answer>?</answer>", -0.5, False),
    ],
)
def test_tool_local_reward_hand_computed(text: str, local: float, valid: bool) -> None:
    env = room_env()
    result = env.step("tool", text)
    assert result.local_reward == pytest.approx(local)
    assert result.valid is valid
    assert result.team_reward == 0.0 and not result.done and env.state.position == env.board.start


def test_plan_rewards_hand_computed() -> None:
    env = room_env()
    first = env.step("plan", "Actions: R D")  # walk, then push the box down: d 5 -> 3
    assert env.state.position == at((2, 2), (3, 2))
    assert first.team_reward == pytest.approx(2 / 5) and first.local_reward == pytest.approx(0.5 * 2 / 5)
    second = env.step("plan", "Actions: L D R")
    assert second.done and env.success()
    assert second.team_reward == 1.0 and second.local_reward == pytest.approx(1.0)


def test_pace_progress_reward_with_the_turns_left() -> None:
    env = room_env(max_turns=2, progress_reward="pace")
    first = env.step("plan", "Actions: R D")  # d 5 -> 3 with 2 turns left: the pace is ceil(5 / 2) = 3
    assert first.team_reward == pytest.approx(2 / 5) and first.local_reward == pytest.approx(0.5 * 2 / 3)
    deadlock = room_env(max_turns=2, progress_reward="pace").step("plan", "Actions: D D R U")
    assert deadlock.local_reward == -0.5  # deadlocks are rated as without pace


def test_deadlock_ends_the_episode_as_failure() -> None:
    env = room_env()
    result = env.step("plan", "Actions: D D R U L L")  # U pushes the box to the top wall; L L never happen
    assert result.done and env.done and not env.success() and env.state.outcome == "deadlocked"
    assert result.team_reward == -1.0 and result.local_reward == -0.5
    assert result.info["deadlocked"] and result.info["applied"] == 4
    assert env.expert("plan") is None


def test_corner_deadlock_but_wall_with_goal_is_fine() -> None:
    env = room_env(LEFT_GOAL)
    walk = env.step("plan", "Actions: R R D L")  # box pushed against the left wall, which holds the goal
    assert env.state.position == at((2, 2), (2, 1)) and not walk.done
    corner = env.step("plan", "Actions: D L U")  # box pushed into the top-left corner
    assert corner.done and env.state.outcome == "deadlocked" and corner.team_reward == -1.0


def test_tool_deadlock_proposal_is_reported_not_committed() -> None:
    env = room_env()
    env.step("tool", "Actions: D D R U")
    assert "deadlock" in env.observe("plan")[1]["content"]
    assert not env.done and env.state.position == env.board.start


def test_clone_is_isolated() -> None:
    env = room_env()
    twin = env.clone()
    twin.step("plan", "Actions: R D")
    assert twin.state.position == at((2, 2), (3, 2)) and twin.state.turn == 1
    assert env.state.position == env.board.start and env.state.turn == 0
    assert twin.board is env.board and twin.board.distances is env.board.distances


def test_observation_mentions_rules_and_board() -> None:
    env = room_env(tool_mode="code")
    system, user = env.observe("tool")
    assert "Sokoban" in system["content"] and "```python" in system["content"]
    assert ROOM.strip() in user["content"] and "$ = box" in user["content"]
    assert "boxes at (2, 2)" in user["content"]


def test_options_and_registry() -> None:
    env = make_env("sokoban", tool_mode="compact")
    assert isinstance(env, SokobanEnv) and env.workflow().roles == ("tool", "plan")
    env.reset(task(2, size=7, boxes=2))
    board = env.board
    assert (board.height, board.width, len(board.goals), len(board.start.boxes)) == (7, 7, 2, 2)
    with pytest.raises(ValueError, match="bad sokoban options"):
        env.reset(task(2, size=2))
    with pytest.raises(ValueError, match="solvable positions"):
        env.reset(task(2, size=8, boxes=3, max_solver_states=1_000))


def test_reset_is_deterministic_and_seeds_differ() -> None:
    env = SokobanEnv(tool_mode="compact")
    boards = []
    for seed in range(50):
        env.reset(task(seed))
        text = env.render(env.board.start)
        env.reset(task(seed))
        assert env.render(env.board.start) == text
        boards.append(text)
    assert len(set(boards)) >= 48


@pytest.mark.parametrize(("split", "options"), [("train", {}), ("eval", {}), ("train", {"boxes": 2})])
def test_expert_solves_generated_boards(split: str, options: dict[str, int]) -> None:
    env = SokobanEnv(tool_mode="compact")
    for seed in range(30):
        env.reset(task(seed, split, **options))
        board = env.board
        assert all((r, c) not in board.floor for r in range(board.height) for c in (0, board.width - 1))
        assert not set(board.start.boxes) & set(board.goals)
        assert env.step("tool", env.expert("tool")).local_reward == 1.0
        result = env.step("plan", env.expert("plan"))
        assert result.done and env.success() and result.local_reward == 1.0
        assert result.info["applied"] == env.distance(board.start)


def test_expert_program_agrees_with_the_table(monkeypatch: pytest.MonkeyPatch) -> None:
    """Forward BFS (the code-mode expert, run in-process) finds exactly the backward table's optimum."""
    env = SokobanEnv(tool_mode="compact", boxes=2)
    for seed in range(10):
        env.reset(task(seed))
        simulation = env.simulate(env.board.start, expert_program_moves(env, EXPERT_PROGRAM, monkeypatch))
        assert simulation.solved and simulation.applied == env.distance(env.board.start)


def test_splits_are_disjoint() -> None:
    env = SokobanEnv(tool_mode="compact")
    keys = start_boards_by_split(env, "sokoban", seeds=200)
    assert not keys["train"] & keys["eval"]
    assert len(keys["train"]) > 150 and len(keys["eval"]) > 150


@pytest.mark.sandbox
def test_code_mode_runs_the_expert_program_in_the_sandbox() -> None:
    env = SokobanEnv(tool_mode="code", code_time_limit_s=1.0)
    env.reset(task(5))
    result = env.step("tool", env.expert("tool"))
    assert result.valid and result.local_reward == 1.0, result.info
    timeout = env.step("tool", "```python\nwhile True:\n    pass\n```")
    assert (timeout.local_reward, timeout.valid) == (-0.5, False) and "time" in timeout.info["error"]
