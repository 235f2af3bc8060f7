"""Sokoban (issue 25 item 5): what the plan agent answers first on each held-out board, before and after RL.

For every run folder of the learning harness given (saved with `checkpoint_every=STEPS`, so that its last step is kept),
it replays the run's own held-out evaluation (the same boards, the greedy tree rollout and the sampled episodes with the
evaluation's random numbers) twice: with the run's starting model (`model.path`, the warm start) and with its last
checkpoint. Per board it keeps greedy and sampled success and the plan agent's turn-0 reply; the plan agent acts on the
start position at turn 0 (a compact tool proposal changes nothing), so its first move is optimal when it lowers the
distance d0 by one. It writes `OUT` (JSON): per model, the number of distinct turn-0 plan replies, the most common ones,
the share of boards whose reply starts with an optimal move, holds one move, or is unreadable, the success; per run, the
paired per-board differences after - before (mean and standard error over the boards), and from its `metrics.jsonl` its
held-out curve and training metrics averaged over windows of `--window` steps.

    OMP_NUM_THREADS=1 python -m research.sokoban_sudoku --runs base=runs/sokoban_fix/base/sokoban/seed0/\
at_grpo_shared --out runs/sokoban_fix/replies.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import statistics
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from verl_mas.env import make_env
from verl_mas.local.config import CONFIG_FILE, read_config
from verl_mas.local.reporting import read_metrics
from verl_mas.local.train import LocalRun, find_checkpoint, make_tasks
from verl_mas.rollout import EpisodeResult
from verl_mas_envs.puzzles.grid import IllegalMove, parse_actions

TOP_REPLIES = 5
# training metrics averaged over windows of steps; neg_logprob (the sampled tokens' mean -log p) falls as the policy
# narrows onto fixed replies
WINDOW_KEYS = (
    "rollout/success",
    "rollout/reward",
    "rollout/plan/response_length",
    "rollout/invalid_move_share",
    "rollout/zero_variance_share",
    "update/shared/neg_logprob",
)


def plan_opening(result: EpisodeResult, env_options: dict[str, Any]) -> dict[str, Any]:
    """One board's greedy episode: d0, the plan agent's turn-0 reply, whether its first move is optimal, success."""
    env = make_env(result.task.env, **env_options)
    env.reset(result.task)
    start = env.board.start
    d0 = env.distance(start)
    replies = [s.text for s in result.samples if s.role == "plan" and s.turn == 0 and s.continued]
    reply = replies[0] if replies else None
    actions = parse_actions(reply) if reply is not None else None
    first_optimal = False
    if actions:
        moved = env.move(start, actions[0])
        first_optimal = not isinstance(moved, IllegalMove) and env.distance(moved) == d0 - 1
    return {
        "uid": result.task.uid,
        "d0": d0,
        "reply": reply,
        "moves": len(actions) if actions else 0,
        "first_optimal": first_optimal,
        "success": bool(result.success),
    }


def opening_summary(openings: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Across boards: how varied the turn-0 plan replies are and how often they start right."""
    boards = len(openings)
    replies = Counter(o["reply"] for o in openings)
    return {
        "boards": boards,
        "distinct_replies": len(replies),
        "top_replies": [[reply, count] for reply, count in replies.most_common(TOP_REPLIES)],
        "first_move_optimal_share": sum(o["first_optimal"] for o in openings) / boards,
        "one_move_share": sum(o["moves"] == 1 for o in openings) / boards,
        "unreadable_share": sum(o["moves"] == 0 for o in openings) / boards,
        "greedy_success": sum(o["success"] for o in openings) / boards,
    }


def paired_difference(before: Sequence[float], after: Sequence[float]) -> dict[str, float]:
    """Mean of the per-board differences after - before and its standard error (sample sd / sqrt(n))."""
    if len(before) != len(after) or len(before) < 2:
        raise ValueError(f"paired_difference needs two equal lists of at least 2, got {len(before)} and {len(after)}")
    diffs = [a - b for a, b in zip(after, before, strict=True)]
    n = len(diffs)
    mean = sum(diffs) / n
    sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (n - 1))
    return {"mean": mean, "se": sd / math.sqrt(n), "boards": n}


def replay(run_folder: Path, checkpoint: bool) -> dict[str, Any]:
    """The run's held-out evaluation with its starting model (checkpoint=False) or its last checkpoint."""
    config = read_config(run_folder / CONFIG_FILE)
    found = find_checkpoint(run_folder) if checkpoint else None
    run = LocalRun(config, lambda _: None, found)
    step = run.load(found)[0] if found is not None else 0
    tasks = make_tasks(config, "eval", 0, config.eval_tasks)
    greedy = run.rollout(tasks, run.evaluator, 1, "tree")
    run.sampled_evaluator.set_rng_state(run.sampled_evaluator_start)
    samples = config.eval_samples
    sampled = run.rollout(tasks, run.sampled_evaluator, samples, "independent")
    openings = [plan_opening(r, config.env_options) for r in greedy]
    return {
        "step": step,
        "openings": openings,
        "summary": opening_summary(openings),
        "sampled": [
            sum(r.success for r in sampled[i * samples : (i + 1) * samples]) / samples for i in range(len(tasks))
        ],
    }


def training_windows(
    history: Sequence[dict[str, float]], width: int, keys: Sequence[str] = WINDOW_KEYS
) -> list[dict[str, Any]]:
    """Means of `keys` over consecutive windows of `width` training steps (a key a step lacks is skipped; nan where
    no step of the window has it)."""
    steps = [row for row in history if "time/step_s" in row]
    windows = []
    for start in range(0, len(steps), width):
        rows = steps[start : start + width]
        means = {key: statistics.fmean([row[key] for row in rows if key in row] or [math.nan]) for key in keys}
        windows.append({"steps": f"{rows[0]['step']}-{rows[-1]['step']}"} | means)
    return windows


def evaluations(history: Sequence[dict[str, float]]) -> list[dict[str, float]]:
    """The run's held-out curve: greedy and sampled success at every evaluation."""
    keys = ("step", "eval/success", "eval_sampled/success")
    return [{key: row[key] for key in keys} for row in history if "eval/success" in row]


def starting_key(run_folder: Path) -> str:
    """What the replay of a run's starting model depends on: runs that differ only in their update share it."""
    config = read_config(run_folder / CONFIG_FILE)
    return json.dumps([dataclasses.asdict(config) | {"update": None, "output_dir": None, "steps": None}], default=str)


def compare(label: str, run_folder: Path, starts: dict[str, dict[str, Any]], window: int) -> dict[str, Any]:
    """Before and after one run, with the paired per-board differences, its held-out curve and its training metrics
    over windows of `window` steps; `starts` keeps the replays of starting models, to share them between runs."""
    key = starting_key(run_folder)
    if key not in starts:
        starts[key] = replay(run_folder, False)
    before, after = starts[key], replay(run_folder, True)
    history = read_metrics(run_folder)
    greedy = [[float(o["success"]) for o in side["openings"]] for side in (before, after)]
    return {
        "label": label,
        "run": str(run_folder),
        "before": before,
        "after": after,
        "greedy_difference": paired_difference(*greedy),
        "sampled_difference": paired_difference(before["sampled"], after["sampled"]),
        "evaluations": evaluations(history),
        "training_windows": training_windows(history, window),
    }


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(
        prog="python -m research.sokoban_sudoku",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--runs", nargs="+", required=True, help="LABEL=RUN_FOLDER, a learning-harness run with checkpoints"
    )
    parser.add_argument("--out", required=True, help="the JSON report")
    parser.add_argument("--window", type=int, default=10, help="training steps per window of the training metrics")
    args = parser.parse_args(argv)
    runs = [item.split("=", 1) for item in args.runs]
    if any(len(run) != 2 for run in runs):
        parser.error("--runs takes LABEL=RUN_FOLDER items")
    starts: dict[str, dict[str, Any]] = {}
    report = {"runs": [compare(label, Path(folder), starts, args.window) for label, folder in runs]}
    Path(args.out).write_text(json.dumps(report, indent=1))
    for run in report["runs"]:
        b, a = run["before"]["summary"], run["after"]["summary"]
        g, s = run["greedy_difference"], run["sampled_difference"]
        print(
            f"{run['label']}: step {run['after']['step']}, greedy {b['greedy_success']:.3f} -> "
            f"{a['greedy_success']:.3f} "
            f"(paired {g['mean']:+.3f} +- {g['se']:.3f}), sampled paired {s['mean']:+.3f} +- {s['se']:.3f}; distinct "
            f"turn-0 plan replies {b['distinct_replies']} -> {a['distinct_replies']}, first move optimal "
            f"{b['first_move_optimal_share']:.3f} -> {a['first_move_optimal_share']:.3f}, one move "
            f"{b['one_move_share']:.3f} -> {a['one_move_share']:.3f}; top after: {a['top_replies'][:3]}"
        )
    return report


if __name__ == "__main__":
    main()
