"""Plan-Path: rules, generation (solvable, deterministic, split-disjoint), rewards on a hand-built board, turns."""

from __future__ import annotations

import pytest

from grid_testkit import expert_program_moves, grid_task, start_boards_by_split
from verl_mas.env import Task, make_env
from verl_mas_envs.puzzles.grid import IllegalMove
from verl_mas_envs.puzzles.plan_path import EXPERT_PROGRAM, PlanPathBoard, PlanPathEnv

# d(cell) by hand: (2,1)=1, (2,0)=2, (1,0)=3, (0,0)=4 (start), (0,1)=5.
SMALL = """
A.#
.##
..G
"""


def small_env(tool_mode: str = "compact", max_turns: int = 5, **options: object) -> PlanPathEnv:
    env = PlanPathEnv(tool_mode=tool_mode, max_turns=max_turns, **options)
    env.load(PlanPathBoard.from_text(SMALL))
    return env


def task(seed: int, split: str = "train", **options: object) -> Task:
    return grid_task("plan_path", seed, split, **options)


def test_board_from_text_and_distances() -> None:
    board = PlanPathBoard.from_text(SMALL)
    assert (board.height, board.width, board.start, board.goal) == (3, 3, (0, 0), (2, 2))
    assert board.walls == {(0, 2), (1, 1), (1, 2)}
    assert board.distances == ((4, 5, -1), (3, -1, -1), (2, 1, 0))
    assert board.render(board.start) == SMALL.strip()


def test_moves_walls_and_bounds() -> None:
    env = small_env()
    assert env.move((0, 0), "R") == (0, 1)
    assert env.move((0, 0), "D") == (1, 0)
    assert env.move((0, 1), "R") == IllegalMove("walks into a wall")
    assert env.move((0, 1), "D") == IllegalMove("walks into a wall")
    assert env.move((0, 0), "U") == IllegalMove("leaves the grid")
    assert env.move((0, 0), "L") == IllegalMove("leaves the grid")
    assert env.move((2, 2), "D") == IllegalMove("leaves the grid")


@pytest.mark.parametrize(
    ("text", "local", "valid"),
    [
        ("Actions: D D R R", 1.0, True),  # optimal
        ("Actions: R L D D R R", 0.5 + 0.5 * 4 / 6, True),  # reaches the goal in 6 moves, optimal 4
        ("Actions: D", 0.5 * (4 - 3) / 4, True),  # progress 1 of 4
        ("Actions: R", 0.5 * (4 - 5) / 4, True),  # moved away
        ("Actions: R D", 0.5 * (4 - 5) / 4 - 0.25, False),  # stops at the wall after R
        ("Actions: U D", -0.25, False),  # first move leaves the grid: nothing applied
        ("no idea", -0.5, False),
        ("", -0.5, False),
    ],
)
def test_tool_local_reward_hand_computed(text: str, local: float, valid: bool) -> None:
    env = small_env()
    result = env.step("tool", text)
    assert result.local_reward == pytest.approx(local)
    assert result.valid is valid
    assert result.team_reward == 0.0  # a proposal commits nothing
    assert not result.done and env.state.position == (0, 0) and env.state.turn == 0


@pytest.mark.parametrize(
    ("text", "local"),
    [
        ("Actions: D", 0.5 * 1 / 2),  # 3 turns left, d = 4: the pace is ceil(4 / 3) = 2 moves a turn
        ("Actions: D D", 0.5),  # keeps the pace
        ("Actions: D D R", 0.5),  # ahead of the pace: clipped
        ("Actions: R", 0.5 * -1 / 2),  # moved away
        ("Actions: R D", 0.5 * -1 / 2 - 0.25),  # stops at the wall after R
        ("Actions: D D R R", 1.0),  # solving is rated as without pace
    ],
)
def test_pace_rates_progress_against_the_moves_needed_per_remaining_turn(text: str, local: float) -> None:
    env = small_env(max_turns=3, progress_reward="pace")
    assert env.step("tool", text).local_reward == pytest.approx(local)


def test_pace_tightens_as_turns_run_out() -> None:
    env = small_env(max_turns=3, progress_reward="pace")
    rewards = [env.step("plan", "Actions: D").local_reward]  # d 4 -> 3, 3 turns left: pace 2
    rewards.append(env.step("plan", "Actions: D").local_reward)  # d 3 -> 2, 2 turns left: pace 2
    env_last = small_env(max_turns=3, progress_reward="pace")
    env_last.step("plan", "no move")
    env_last.step("plan", "Actions: D D")  # d 4 -> 2 with 2 turns left: pace 2
    rewards.append(env_last.step("plan", "Actions: R").local_reward)  # d 2 -> 1, last turn: pace 2
    assert rewards == pytest.approx([0.25, 0.25, 0.25])
    fraction = small_env(max_turns=3)
    assert fraction.step("plan", "Actions: D").local_reward == pytest.approx(0.5 * 1 / 4)


def test_progress_reward_must_be_known() -> None:
    with pytest.raises(ValueError, match="progress_reward must be 'fraction' or 'pace'"):
        PlanPathEnv(progress_reward="speed")


def test_plan_commits_moves_and_rewards() -> None:
    env = small_env()
    first = env.step("plan", "Let me go down twice. Actions: D D")
    assert env.state.position == (2, 0) and env.state.turn == 1
    assert first.team_reward == pytest.approx((4 - 2) / 4)
    assert first.local_reward == pytest.approx(0.5 * (4 - 2) / 4)
    assert first.valid and not first.done
    second = env.step("plan", "Actions: R R L")  # the trailing L comes after the goal and is never applied
    assert env.state.position == (2, 2)
    assert second.team_reward == 1.0 and second.local_reward == pytest.approx(1.0)
    assert second.done and env.done and env.success()
    assert second.info["applied"] == 2
    assert env.expert("plan") is None
    with pytest.raises(RuntimeError, match="after the episode ended"):
        env.step("tool", "Actions: U")


def test_plan_illegal_move_stops_there_and_keeps_prefix() -> None:
    env = small_env()
    result = env.step("plan", "Actions: R R D")
    assert env.state.position == (0, 1)
    assert not result.valid
    assert result.info["illegal"] == "walks into a wall" and result.info["applied"] == 1
    assert result.team_reward == pytest.approx((4 - 5) / 4)
    assert result.local_reward == pytest.approx(0.5 * (4 - 5) / 4 - 0.25)


def test_unparsable_plan_is_penalised_uses_the_turn_and_moves_nothing() -> None:
    env = small_env(max_turns=2)
    result = env.step("plan", "I am not sure what to do here.")
    assert (result.local_reward, result.team_reward, result.valid, result.done) == (-0.5, 0.0, False, False)
    assert env.state.position == (0, 0) and env.state.turn == 1
    last = env.step("plan", "\x00" * 10_000)
    assert last.done and env.done and not env.success() and env.state.outcome == "out_of_turns"


def test_out_of_turns_keeps_progress_reward() -> None:
    env = small_env(max_turns=1)
    result = env.step("plan", "Actions: D")
    assert result.done and not env.success()
    assert result.team_reward == pytest.approx(0.25)


def test_observations_show_board_proposal_and_last_turn() -> None:
    env = small_env(tool_mode="code")
    tool_system, tool_user = env.observe("tool")
    assert tool_system["role"] == "system" and tool_user["role"] == "user"
    assert "```python" in tool_system["content"] and "standard input" in tool_system["content"]
    assert SMALL.strip() in tool_user["content"] and "Legend" in tool_user["content"]
    assert "Turn 1 of 5" in tool_user["content"] and "Last turn" not in tool_user["content"]
    assert "no proposal" in env.observe("plan")[1]["content"]

    compact = small_env()
    compact.step("tool", "Actions: D D R")
    plan_user = compact.observe("plan")[1]["content"]
    assert "The tool agent proposed: D D R" in plan_user and "not solved yet" in plan_user
    assert "\n.AG" in plan_user  # the board after the proposal
    assert "```python" not in compact.observe("tool")[0]["content"]
    compact.step("plan", "Actions: D")
    tool_user = compact.observe("tool")[1]["content"]
    assert "Turn 2 of 5" in tool_user and "Last turn: The plan agent moved: D" in tool_user
    assert "The tool agent proposed" not in compact.observe("plan")[1]["content"]  # proposals last one turn


def test_clone_is_isolated() -> None:
    env = small_env()
    env.step("tool", "Actions: D")
    twin = env.clone()
    twin.step("plan", "Actions: D D R R")
    assert twin.success() and twin.state.turn == 1
    assert not env.done and env.state.position == (0, 0) and env.state.turn == 0
    assert "proposed: D" in env.observe("plan")[1]["content"]
    assert twin.board is env.board  # the immutable board is shared, not copied


def test_unknown_role_and_missing_reset() -> None:
    with pytest.raises(RuntimeError, match="reset"):
        PlanPathEnv().observe("plan")
    with pytest.raises(ValueError, match="unknown role"):
        small_env().step("coder", "Actions: U")


def test_options_and_registry() -> None:
    env = make_env("plan_path", tool_mode="compact", max_turns=3)
    assert isinstance(env, PlanPathEnv) and env.workflow().roles == ("tool", "plan")
    assert env.workflow().mode == "sequential" and env.workflow().max_turns == 3
    env.reset(task(1, size=5, wall_ratio=0.3))
    assert (env.board.height, env.board.width, len(env.board.walls)) == (5, 5, 8)
    with pytest.raises(ValueError, match="bad plan_path options"):
        env.reset(task(1, walls=3))
    with pytest.raises(ValueError, match="wall_ratio"):
        PlanPathEnv(size=3, wall_ratio=0.9)
    with pytest.raises(ValueError, match="tool_mode"):
        PlanPathEnv(tool_mode="python")


def test_reference_board_shape() -> None:
    env = PlanPathEnv()
    env.reset(task(0))
    assert (env.board.height, env.board.width, len(env.board.walls)) == (10, 10, 22)


def test_reset_is_deterministic_and_seeds_differ() -> None:
    env = PlanPathEnv(tool_mode="compact")
    boards = []
    for seed in range(50):
        env.reset(task(seed))
        text = env.render(env.board.start)
        env.reset(task(seed))
        assert env.render(env.board.start) == text
        boards.append(text)
    assert len(set(boards)) == 50


@pytest.mark.parametrize("split", ["train", "eval"])
def test_expert_solves_generated_boards(split: str) -> None:
    env = PlanPathEnv(tool_mode="compact")
    for seed in range(30):
        env.reset(task(seed, split))
        optimal = env.distance(env.board.start)
        tool = env.step("tool", env.expert("tool"))
        assert tool.local_reward == 1.0
        result = env.step("plan", env.expert("plan"))
        assert result.done and env.success() and result.team_reward == 1.0 and result.local_reward == 1.0
        assert result.info["applied"] == optimal


def test_expert_program_matches_bfs_distance(monkeypatch: pytest.MonkeyPatch) -> None:
    """The code-mode expert program, run in-process here, prints a shortest path (the sandbox test runs it for real)."""
    env = PlanPathEnv(tool_mode="compact")
    for seed in range(20):
        env.reset(task(seed))
        simulation = env.simulate(env.board.start, expert_program_moves(env, EXPERT_PROGRAM, monkeypatch))
        assert simulation.solved and simulation.applied == env.distance(env.board.start)


def test_splits_are_disjoint() -> None:
    env = PlanPathEnv(tool_mode="compact")
    keys = start_boards_by_split(env, "plan_path", seeds=200)
    assert len(keys["train"]) == len(keys["eval"]) == 200
    assert not keys["train"] & keys["eval"]


@pytest.mark.sandbox
def test_code_mode_runs_the_expert_program_in_the_sandbox() -> None:
    env = PlanPathEnv(tool_mode="code")
    env.reset(task(3))
    expert = env.expert("tool")
    assert expert.startswith("```python\n")
    result = env.step("tool", "Here is a BFS.\n" + expert)
    assert result.valid and result.local_reward == 1.0, result.info
    assert "solves the puzzle" in env.observe("plan")[1]["content"]
    assert env.step("plan", env.expert("plan")).done and env.success()


@pytest.mark.sandbox
def test_code_mode_failures_are_invalid_moves() -> None:
    env = PlanPathEnv(tool_mode="code")
    env.reset(task(4))
    crashed = env.step("tool", "```python\nraise ValueError('boom')\n```")
    assert (crashed.local_reward, crashed.valid) == (-0.5, False)
    assert "boom" in crashed.info["error"] and "boom" in env.observe("plan")[1]["content"]
    noise = env.step("tool", "```python\nprint('I cannot solve this')\n```")
    assert (noise.local_reward, noise.valid) == (-0.5, False) and "printed no action list" in noise.info["error"]
    no_code = env.step("tool", "Actions: U R")  # code mode wants a program; no sandbox run happens
    assert (no_code.local_reward, no_code.valid) == (-0.5, False) and "code block" in no_code.info["error"]
