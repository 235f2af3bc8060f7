"""Tests of the sudoku environment: rules, generator, splits, parser, rewards, clones, expert and code mode."""

from __future__ import annotations

import time

import pytest

from verl_mas.env import Task, make_env, split_of
from verl_mas_envs.puzzles.sudoku import EXPERT_PROGRAM, SudokuConfig, SudokuEnv
from verl_mas_envs.puzzles.sudoku_grid import (
    SudokuBoard,
    board_key,
    count_solutions,
    find_conflicts,
    generate_board,
    parse_grid,
    stdin_text,
)
from verl_mas_envs.puzzles.toolplan import INVALID_OUTPUT_REWARD

# A hand-built 4x4 puzzle: 6 givens, 10 empty cells.
SOLUTION = ((1, 2, 3, 4), (3, 4, 1, 2), (2, 1, 4, 3), (4, 3, 2, 1))
PUZZLE = ((1, 0, 0, 0), (0, 4, 0, 2), (0, 0, 4, 0), (4, 0, 0, 1))
SOLUTION_TEXT = "\n".join(" ".join(map(str, row)) for row in SOLUTION)


def hand_built_env(tool_mode: str = "compact", **options) -> SudokuEnv:
    env = SudokuEnv(size=4, tool_mode=tool_mode, **options)
    env.load(SudokuBoard(PUZZLE, SOLUTION))
    return env


def reset_env(seed: int, split: str = "train", **options) -> SudokuEnv:
    env = SudokuEnv(**options)
    env.reset(Task(uid=f"t{seed}", env="sudoku", seed=seed, split=split))
    return env


def grid_text(grid) -> str:
    return "\n".join(" ".join(str(v) for v in row) for row in grid)


# ----------------------------------------------------------------------------------------------- rules, solver


def test_conflicts_name_row_column_and_box():
    grid = ((1, 1, 0, 0), (0, 0, 0, 0), (1, 0, 0, 0), (0, 0, 0, 0))
    conflicts = find_conflicts(grid)
    assert "row 1 has 2x 1" in conflicts
    assert "column 1 has 2x 1" in conflicts
    assert "box 1 has 2x 1" in conflicts
    assert len(conflicts) == 3
    assert find_conflicts(SOLUTION) == ()


def test_solver_counts_all_4x4_grids_and_rejects_conflicting_givens():
    assert count_solutions(((0,) * 4,) * 4, limit=10_000) == 288
    assert count_solutions(PUZZLE) == 1
    assert count_solutions(((1, 1, 0, 0),) + ((0,) * 4,) * 3) == 0


@pytest.mark.parametrize("size, seeds", [(4, range(20)), (9, range(3))])
def test_generated_puzzles_have_one_solution(size, seeds):
    config = SudokuConfig(size=size)
    for seed in seeds:
        board = generate_board(size, config.target_clues, seed, "train")
        puzzle, solution = board.puzzle, board.solution
        assert count_solutions(puzzle, limit=10) == 1
        assert find_conflicts(solution) == () and all(all(row) for row in solution)
        assert all(puzzle[r][c] in (0, solution[r][c]) for r in range(size) for c in range(size))
        assert sum(v != 0 for row in puzzle for v in row) == config.target_clues


def test_clue_count_option_and_validation():
    env = reset_env(1, clues=10)
    assert len(env.board.givens) == 10
    with pytest.raises(ValueError, match="size"):
        SudokuEnv(size=5)
    with pytest.raises(ValueError, match="clues"):
        SudokuEnv(size=4, clues=16)
    with pytest.raises(ValueError, match="tool_mode"):
        make_env("sudoku", tool_mode="shell")
    with pytest.raises(ValueError, match="bad options"):
        make_env("sudoku", colour="red")


def test_task_options_override_constructor_options_per_reset():
    env = SudokuEnv(size=4)
    env.reset(Task(uid="a", env="sudoku", seed=0, options={"size": 9}))
    assert env.board.size == 9 and len(env.state.grid) == 9
    env.reset(Task(uid="b", env="sudoku", seed=0))
    assert env.board.size == 4
    with pytest.raises(ValueError, match="bad sudoku options"):
        env.reset(Task(uid="c", env="sudoku", seed=0, options={"colour": "red"}))


# ----------------------------------------------------------------------------------------------- splits, determinism


def test_train_and_eval_boards_are_disjoint_over_200_seeds():
    boards = {split: [generate_board(4, 6, seed, split) for seed in range(200)] for split in ("train", "eval")}
    for split, drawn in boards.items():
        assert all(split_of(f"sudoku4:{board_key(board.solution)}") == split for board in drawn)
    train_puzzles = {board_key(b.puzzle) for b in boards["train"]}
    eval_puzzles = {board_key(b.puzzle) for b in boards["eval"]}
    assert train_puzzles.isdisjoint(eval_puzzles)
    assert {board_key(b.solution) for b in boards["train"]}.isdisjoint(board_key(b.solution) for b in boards["eval"])
    assert len(train_puzzles) > 190 and len(eval_puzzles) > 190  # seeds really give different boards


def test_same_task_gives_same_board():
    for split in ("train", "eval"):
        first, second = reset_env(7, split), reset_env(7, split)
        assert first.board == second.board
        assert first.observe("tool") == second.observe("tool")
    assert reset_env(7).board.puzzle != reset_env(8).board.puzzle


# ----------------------------------------------------------------------------------------------- expert


@pytest.mark.parametrize("split", ["train", "eval"])
@pytest.mark.parametrize("size", [4, 9])
def test_expert_solves_from_reset(split, size):
    for seed in range(10 if size == 4 else 2):
        env = reset_env(seed, split, size=size, tool_mode="compact")
        tool = env.step("tool", env.expert("tool"))
        assert tool.valid and tool.local_reward == 1.0 and not env.done
        plan = env.step("plan", env.expert("plan"))
        assert plan.valid and plan.team_reward == 1.0 and plan.local_reward == 1.0
        assert env.done and env.success()


def test_expert_code_solves_puzzles_without_sandbox_limits(tmp_path):
    """The expert program itself, run as a plain script, solves both sizes (the sandbox test runs it there)."""
    import subprocess
    import sys

    script = tmp_path / "solver.py"
    script.write_text(EXPERT_PROGRAM)
    for size in (4, 9):
        env = reset_env(3, size=size)
        out = subprocess.run(
            [sys.executable, str(script)], input=stdin_text(env.board.puzzle), capture_output=True, text=True
        )
        assert parse_grid(out.stdout, size).grid == env.board.solution


# ----------------------------------------------------------------------------------------------- parser


@pytest.mark.parametrize(
    "text",
    [
        f"<answer>\n{SOLUTION_TEXT}\n</answer>",
        "Let me think. Row 2 has a 4, so...\n" + SOLUTION_TEXT + "\nThat is my final grid of 4 rows.",
        "<answer>1 2 | 3 4\n3 4 | 1 2\n----+----\n2 1 | 4 3\n4 3 | 2 1</answer>",
        "```\n[[1, 2, 3, 4],\n [3, 4, 1, 2],\n [2, 1, 4, 3],\n [4, 3, 2, 1]]\n```",
        "The answer: [[1,2,3,4],[3,4,1,2],[2,1,4,3],[4,3,2,1]]",
        "Row 1: 1 2 3 4\nRow 2: 3 4 1 2\nRow 3: 2 1 4 3\nRow 4: 4 3 2 1",
        "1234\n3412\n2143\n4321",
        "1234341221434321",
        "<answer>garbage</answer>\n```text\n" + SOLUTION_TEXT + "\n```",
        "first try:\n4 4 4 4\n4 4 4 4\n4 4 4 4\n4 4 4 4\nno wait, fixed:\n" + SOLUTION_TEXT + "\nDone: 4",
    ],
    ids=["answer", "prose", "separators", "json-lines", "json-inline", "labels", "dense", "flat", "fence", "last"],
)
def test_parser_reads_noisy_grids(text):
    assert parse_grid(text, 4).grid == SOLUTION


def test_parser_reads_empty_cells_and_flat_9x9():
    assert parse_grid(". 2 _ 4\n3 4 1 2\n2 1 4 3\n4 3 2 0", 4).grid == (
        (0, 2, 0, 4),
        (3, 4, 1, 2),
        (2, 1, 4, 3),
        (4, 3, 2, 0),
    )
    env = reset_env(0, size=9)
    assert parse_grid(board_key(env.board.solution).replace("/", ""), 9).grid == env.board.solution


@pytest.mark.parametrize(
    "text, error",
    [
        ("", "no grid"),
        ("I cannot solve this puzzle.", "no grid"),
        ("１ ２ ３ ４\n３ ４ １ ２\n２ １ ４ ３\n４ ３ ２ １", "no grid"),  # full-width digits
        ("🙂🙃\u200b\u202e 1 2 3", "no grid"),
        ("1 2 3 4\n3 4 1 2\n2 1 4 3", "wrong grid size"),
        ("1 2 3\n3 4 1\n2 1 4\n4 3 2", "wrong grid size"),
        ("\n".join(["1 2 3 4 5 6 7 8 9"] * 9), "wrong grid size"),
        ("1 2 3 5\n3 4 1 2\n2 1 4 3\n4 3 2 1", "out of range"),
    ],
    ids=["empty", "prose", "fullwidth", "unicode-junk", "3-rows", "3-cols", "9x9-for-4x4", "digit-5"],
)
def test_parser_rejects_malformed_output(text, error):
    parsed = parse_grid(text, 4)
    assert parsed.grid is None
    assert error in parsed.error


def test_parser_is_fast_on_huge_output():
    junk = "lorem ipsum 1 2 3 ... " * 100_000
    start = time.thread_time()  # CPU time: other load on the machine does not count
    assert parse_grid(junk + "\n" + SOLUTION_TEXT, 4).grid == SOLUTION
    assert parse_grid(junk, 4).grid is None
    assert time.thread_time() - start < 2.0


# ----------------------------------------------------------------------------------------------- moves and rewards


def test_rewards_on_hand_built_board():
    env = hand_built_env()
    # 10 empty cells; this grid writes a duplicate 3 in row 4 and column 3
    partial = "1 2 3 .\n3 4 1 2\n. . 4 .\n4 3 3 1"
    tool = env.step("tool", partial)
    assert tool.valid
    # team: the board is still the puzzle (0 of 10); local: cells (0,1) (0,2) (1,0) (1,2) (3,1) right,
    # (3,2) wrong -> 5/10, minus 0.25 for the duplicate 3 in row 4
    assert tool.team_reward == 0.0
    assert tool.local_reward == pytest.approx(5 / 10 - 0.25)
    assert "row 4 has 2x 3" in tool.info["check"]
    plan = env.step("plan", "1 2 3 .\n3 4 1 2\n. . 4 .\n4 3 . 1")  # 5 right, no conflict
    assert plan.valid and plan.team_reward == pytest.approx(0.5) and plan.local_reward == pytest.approx(0.5)
    assert env.state.grid == ((1, 2, 3, 0), (3, 4, 1, 2), (0, 0, 4, 0), (4, 3, 0, 1))
    assert not env.done and env.state.turn == 1
    solved = env.step("plan", SOLUTION_TEXT)
    assert (solved.team_reward, solved.local_reward, solved.done) == (1.0, 1.0, True)


def test_tool_proposal_changing_a_given_is_reported_and_penalised():
    env = hand_built_env()
    changed = "2 1 3 4\n3 4 1 2\n1 2 4 3\n4 3 2 1"  # (0,0) given 1 -> 2
    result = env.step("tool", changed)
    assert result.valid
    assert "changed givens: row 1 col 1" in env.state.proposal.report
    assert result.local_reward == pytest.approx(7 / 10 - 0.25)  # (0,1), (2,0), (2,1) wrong
    assert env.state.grid == PUZZLE


@pytest.mark.parametrize(
    "text, error",
    [
        ("no idea", "no grid"),
        ("2 2 3 4\n3 4 1 2\n2 1 4 3\n4 3 2 1", "changes given cells row 1 col 1"),
        ("1 2 3 4\n3 . 1 2\n2 1 4 3\n4 3 2 1", "changes given cells row 2 col 2"),  # clearing a given
        ("1 2 3 9\n3 4 1 2\n2 1 4 3\n4 3 2 1", "out of range"),
        ("1 2 3\n3 4 1\n2 1 4", "wrong grid size"),
    ],
)
def test_invalid_plan_move_is_penalised_and_changes_nothing(text, error):
    env = hand_built_env()
    env.step("plan", "1 2 . .\n. 4 . 2\n. . 4 .\n4 . . 1")  # one right cell on the board first
    result = env.step("plan", text)
    assert not result.valid
    assert result.local_reward == INVALID_OUTPUT_REWARD
    assert result.team_reward == pytest.approx(1 / 10)
    assert error in result.info["error"]
    assert env.state.grid == ((1, 2, 0, 0), (0, 4, 0, 2), (0, 0, 4, 0), (4, 0, 0, 1))
    assert env.state.turn == 2


def test_unparsable_tool_output_is_invalid_and_reported_to_plan():
    env = hand_built_env()
    result = env.step("tool", "I would use backtracking.")
    assert not result.valid and result.local_reward == INVALID_OUTPUT_REWARD
    assert "no usable grid" in env.observe("plan")[1]["content"]


def test_step_guards():
    env = SudokuEnv()
    with pytest.raises(RuntimeError, match="call reset"):
        env.observe("tool")
    env = hand_built_env()
    with pytest.raises(ValueError, match="sudoku: unknown role 'critic'"):
        env.step("critic", SOLUTION_TEXT)
    env.step("plan", SOLUTION_TEXT)
    assert env.expert("tool") is None
    with pytest.raises(RuntimeError, match=r"after the episode ended \(solved\)"):
        env.step("tool", SOLUTION_TEXT)


def test_the_episode_ends_after_max_turns_unsolved():
    env = hand_built_env(max_turns=2)
    first = env.step("plan", "no grid")
    assert not first.done and not env.done
    env.step("tool", SOLUTION_TEXT)  # a correct proposal commits nothing
    last = env.step("plan", "1 2 . .\n. 4 . 2\n. . 4 .\n4 . . 1")
    assert last.valid and last.done and env.done and not env.success()
    assert env.state.outcome == "out_of_turns" and "Turn 2 of 2" in env.observe("plan")[1]["content"]


# ----------------------------------------------------------------------------------------------- observations, clone


def test_observations_show_board_turn_and_proposal():
    env = hand_built_env()
    tool_messages = env.observe("tool")
    assert [m["role"] for m in tool_messages] == ["system", "user"]
    assert "tool agent" in tool_messages[0]["content"] and "<answer>" in tool_messages[0]["content"]
    assert "Turn 1 of 5" in tool_messages[1]["content"] and "1 . | . ." in tool_messages[1]["content"]
    assert "no proposal" in env.observe("plan")[1]["content"]
    env.step("tool", "1 2 3 4\n3 4 1 2\n2 1 4 3\n4 3 1 2")
    plan_user = env.observe("plan")[1]["content"]
    assert "Tool agent proposal:" in plan_user and "4 3 | 1 2" in plan_user
    assert "row 4 has" not in plan_user  # rows are fine; the conflicts are in columns 3 and 4
    assert "column 3 has 2x 1" in plan_user
    env.step("plan", "1 2 . .\n. 4 . 2\n. . 4 .\n4 . . 1")
    tool_user = env.observe("tool")[1]["content"]
    assert "Turn 2 of 5" in tool_user and "Current board:" in tool_user and "Your proposal in turn 1" in tool_user
    assert "no proposal" in env.observe("plan")[1]["content"]  # last turn's proposal is not this turn's
    code_system = hand_built_env("code").observe("tool")[0]["content"]
    assert "```python" in code_system and "standard input" in code_system


def test_clone_is_independent():
    env = hand_built_env()
    env.step("tool", SOLUTION_TEXT)
    copy = env.clone()
    assert copy.board is env.board and copy.state is env.state  # immutable values are shared, not copied
    copy.step("plan", SOLUTION_TEXT)
    assert copy.done and not env.done
    assert env.state.grid == PUZZLE and env.state.turn == 0
    env.step("tool", "garbage")
    assert copy.state.proposal.grid == SOLUTION and env.state.proposal.grid is None


# ----------------------------------------------------------------------------------------------- code mode (sandbox)


@pytest.mark.parametrize("size", [4, 9])
def test_code_mode_expert_program_runs_in_sandbox(size):
    env = reset_env(5, "eval", size=size, tool_mode="code")
    tool = env.step("tool", "Here is a solver:\n" + env.expert("tool"))
    assert tool.valid and tool.local_reward == 1.0, tool.info
    assert "solves the puzzle" in env.observe("plan")[1]["content"]
    assert env.step("plan", env.expert("plan")).done


@pytest.mark.parametrize(
    "text, error",
    [
        ("just a grid, no program", "no ```python"),
        ("```python\nraise SystemExit(3)\n```", "exited with code 3"),
        ("```python\nprint('hello')\n```", "the program printed no grid: 'hello\\n'"),
        ("<think>\n```python\nprint('1 2 3 4')\n```\n</think>", "no ```python"),  # reasoning is not a program
        ("```python\nprint('\ud800')\n```", "lone surrogate"),
    ],
    ids=["no-code", "exit-code", "prints-no-grid", "code-in-reasoning", "lone-surrogate"],
)
def test_code_mode_failures_are_invalid_moves(text, error):
    env = reset_env(0, tool_mode="code")
    result = env.step("tool", text)
    assert not result.valid and result.local_reward == INVALID_OUTPUT_REWARD
    assert error in result.info["error"]
    assert error in env.observe("plan")[1]["content"]


def test_code_mode_time_limit_option_and_stderr_cap():
    env = reset_env(0, tool_mode="code", code_time_limit_s=0.5)
    assert env.blocking_step  # the rollout runs code-mode steps in threads
    nap = "```python\nimport time\ntime.sleep(2)\nprint('done')\n```"
    assert env.step("tool", nap).info["error"] == "the program ran out of time"
    assert "printed no grid: 'done" in reset_env(0, tool_mode="code").step("tool", nap).info["error"]  # 5 s default
    noisy = env.step("tool", "```python\nimport sys\nsys.exit('x' * 5000 + 'END')\n```")
    assert noisy.info["error"] == "the program exited with code 1: " + "x" * 297 + "END"  # the last 300 characters
    assert not SudokuEnv(tool_mode="compact").blocking_step and not SudokuEnv(single_agent=True).blocking_step
