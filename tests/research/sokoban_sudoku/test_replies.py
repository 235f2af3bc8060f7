"""research.sokoban_sudoku.replies: the turn-0 plan reply diagnostic and the paired differences, on hand-made inputs."""

import math

import pytest

from research.sokoban_sudoku import replies
from verl_mas.dataset import split_tasks
from verl_mas.env import make_env
from verl_mas.rollout import EpisodeResult
from verl_mas.sample import Sample
from verl_mas_envs.puzzles.grid import IllegalMove

OPTIONS = {"size": 5, "boxes": 1, "tool_mode": "compact", "max_turns": 3, "brief_prompts": True}


def sample(role: str, turn: int, text: str, continued: bool = True) -> Sample:
    return Sample("t", role, turn, 0, "shared", (1,), (2,), None, 0.0, 0.0, 0.0, continued, text=text)


def episode(texts: dict[tuple[str, int], str], success: bool = False) -> EpisodeResult:
    (task,) = split_tasks("sokoban", "eval", 1, 0, OPTIONS)
    samples = [sample(role, turn, text) for (role, turn), text in texts.items()]
    return EpisodeResult(task, samples, success=success)


def optimal_and_wrong_first_move():
    (task,) = split_tasks("sokoban", "eval", 1, 0, OPTIONS)
    env = make_env("sokoban", **OPTIONS)
    env.reset(task)
    start = env.board.start
    d0 = env.distance(start)
    # a move that is illegal or does not bring the solution one move closer
    wrong = [
        m for m in "UDLR" if isinstance(env.move(start, m), IllegalMove) or env.distance(env.move(start, m)) != d0 - 1
    ]
    return env.optimal_actions(start), wrong[0], d0


def test_the_opening_reads_the_plan_agents_turn_0_reply_only():
    best, wrong, d0 = optimal_and_wrong_first_move()
    texts = {("tool", 0): f"Actions: {wrong}", ("plan", 0): f"Actions: {best[0]}", ("plan", 1): f"Actions: {wrong}"}
    result = episode(texts, success=True)
    assert replies.plan_opening(result, OPTIONS) == {
        "uid": result.task.uid,
        "d0": d0,
        "reply": f"Actions: {best[0]}",
        "moves": 1,
        "first_optimal": True,
        "success": True,
    }
    texts = {("plan", 0): f"Actions: {wrong} {best[0]}"}
    assert not replies.plan_opening(episode(texts), OPTIONS)["first_optimal"]
    unreadable = replies.plan_opening(episode({("plan", 0): "no moves here"}), OPTIONS)
    assert (unreadable["moves"], unreadable["first_optimal"]) == (0, False)


def test_the_summary_counts_distinct_replies_and_shares():
    openings = [
        {"reply": "Actions: U", "moves": 1, "first_optimal": True, "success": True},
        {"reply": "Actions: U", "moves": 1, "first_optimal": False, "success": False},
        {"reply": "Actions: L R", "moves": 2, "first_optimal": False, "success": False},
        {"reply": "?", "moves": 0, "first_optimal": False, "success": False},
    ]
    summary = replies.opening_summary(openings)
    assert summary["distinct_replies"] == 3
    assert summary["top_replies"][0] == ["Actions: U", 2]
    assert (summary["first_move_optimal_share"], summary["one_move_share"]) == (0.25, 0.5)
    assert (summary["unreadable_share"], summary["greedy_success"]) == (0.25, 0.25)


def test_the_paired_difference_is_the_mean_and_its_standard_error():
    result = replies.paired_difference([1, 0, 1, 0], [1, 1, 0, 0])
    # differences 0, 1, -1, 0: mean 0, sample sd sqrt(2/3)
    assert result["mean"] == 0 and result["se"] == pytest.approx(math.sqrt(2 / 3) / 2) and result["boards"] == 4
    with pytest.raises(ValueError, match="two equal lists"):
        replies.paired_difference([1, 0], [1])


def test_training_windows_average_the_steps_and_skip_evaluations():
    keys = dict.fromkeys(replies.WINDOW_KEYS, 1.0)
    history = [{"step": 0, "eval/success": 0.5, "eval_sampled/success": 0.25}]
    history += [{"step": s, "time/step_s": 1.0} | keys | {"rollout/success": float(s)} for s in range(1, 6)]
    history[-1] |= {"eval/success": 0.75, "eval_sampled/success": 0.5}
    windows = replies.training_windows(history, 2)
    assert [w["steps"] for w in windows] == ["1-2", "3-4", "5-5"]
    assert [w["rollout/success"] for w in windows] == [1.5, 3.5, 5.0] and windows[0]["rollout/reward"] == 1.0
    assert replies.evaluations(history) == [
        {"step": 0, "eval/success": 0.5, "eval_sampled/success": 0.25},
        {"step": 5, "eval/success": 0.75, "eval_sampled/success": 0.5},
    ]
