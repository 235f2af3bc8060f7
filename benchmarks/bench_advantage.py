"""Benchmark: at_grpo (grouped by uid, and by task/role/turn) against verl's grpo_vectorized on one batch.

All three come from verl's estimator registry and are called as verl's dispatcher calls them. Each round times the
three once, in an order that rotates from round to round, so that drifting load on the machine hits all of them
alike; a ratio is taken per round (ours / verl's, same round) and reported as the median over rounds with its
quartiles.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from verl.trainer.ppo.core_algos import get_adv_estimator_fn

from verl_mas.advantage import registered_estimator

BATCH, LENGTH, GROUP = 4096, 512, 8
ROUNDS, WARMUP_ROUNDS = 300, 10
VERL = "grpo_vectorized (verl), uid"
CLOCKS = {"wall": time.perf_counter, "cpu": time.thread_time}


def batch() -> dict[str, torch.Tensor | np.ndarray]:
    """Outcome rewards on 4096 responses of up to 512 tokens; a verl-style uid per group of 8, and the same groups
    as (task, role, turn): 64 samples per task, 2 roles x 4 turns x 8 candidates."""
    torch.manual_seed(0)
    rewards = torch.zeros(BATCH, LENGTH)
    lengths = torch.randint(1, LENGTH + 1, (BATCH,))
    mask = (torch.arange(LENGTH)[None, :] < lengths[:, None]).float()
    rewards[torch.arange(BATCH), lengths - 1] = torch.randn(BATCH)
    return {
        "rewards": rewards,
        "mask": mask,
        "uid": np.array([f"task-{i // GROUP:05d}" for i in range(BATCH)], dtype=object),
        "task": np.array([f"task-{i // (GROUP * 8):05d}" for i in range(BATCH)], dtype=object),
        "role": np.array(["tool" if (i // GROUP) % 2 == 0 else "plan" for i in range(BATCH)], dtype=object),
        "turn": np.array([(i // (GROUP * 2)) % 4 for i in range(BATCH)], dtype=np.int64),
    }


def timed_rounds(
    calls: dict[str, Callable[[], object]], rounds: int, clock: Callable[[], float]
) -> dict[str, np.ndarray]:
    """Seconds per call and round, the first WARMUP_ROUNDS dropped; the call order rotates every round."""
    names = list(calls)
    seconds = {name: [] for name in names}
    for round_index in range(WARMUP_ROUNDS + rounds):
        shift = round_index % len(names)
        for name in names[shift:] + names[:shift]:
            start = clock()
            calls[name]()
            elapsed = clock() - start
            if round_index >= WARMUP_ROUNDS:
                seconds[name].append(elapsed)
    return {name: np.array(values) for name, values in seconds.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0: torch's default)")
    parser.add_argument(
        "--clock",
        choices=CLOCKS,
        default="wall",
        help="wall: elapsed time; cpu: this thread's CPU time, blind to preemption by other jobs (needs --threads 1)",
    )
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.clock == "cpu" and torch.get_num_threads() != 1:
        parser.error("--clock cpu times the calling thread only: add --threads 1")
    data = batch()
    rewards, mask = data["rewards"], data["mask"]
    verl_grpo, at_grpo = get_adv_estimator_fn("grpo_vectorized"), registered_estimator()
    common = {"token_level_rewards": rewards, "response_mask": mask, "config": None}
    by_key = {"index": data["task"], "role": data["role"], "turn": data["turn"], "grouping": "task_role_turn"}
    calls = {
        VERL: lambda: verl_grpo(**common, index=data["uid"]),
        "at_grpo, uid": lambda: at_grpo(**common, index=data["uid"]),
        "at_grpo, (task, role, turn)": lambda: at_grpo(**common, **by_key),
    }
    ours, _ = at_grpo(**common, **by_key)
    theirs, _ = verl_grpo(**common, index=data["uid"])
    assert torch.allclose(ours, theirs, atol=1e-5), "the two groupings describe the same groups"

    load_before = os.getloadavg()[0]
    seconds = timed_rounds(calls, args.rounds, CLOCKS[args.clock])
    rows = {}
    for name, times in seconds.items():
        ratios = times / seconds[VERL]
        rows[name] = {
            "ms_median": float(np.median(times) * 1e3),
            "ms_quartiles": [float(q * 1e3) for q in np.percentile(times, [25, 75])],
            "ratio_median": float(np.median(ratios)),
            "ratio_quartiles": [float(q) for q in np.percentile(ratios, [25, 75])],
        }
    setting = {
        "batch": BATCH,
        "length": LENGTH,
        "group": GROUP,
        "rounds": args.rounds,
        "torch_threads": torch.get_num_threads(),
        "clock": args.clock,
        "load_average_1min": [load_before, os.getloadavg()[0]],
    }
    print(
        f"batch {BATCH} x {LENGTH}, groups of {GROUP}; {args.rounds} rounds, rotating order, {args.clock} clock, "
        f"{setting['torch_threads']} torch threads, 1-min load average {load_before:.1f} -> {os.getloadavg()[0]:.1f}"
    )
    print(f"{'estimator':<30} {'median ms':>10} {'quartiles ms':>15} {'ratio':>7} {'quartiles':>13}")
    for name, row in rows.items():
        ms_low, ms_high = row["ms_quartiles"]
        low, high = row["ratio_quartiles"]
        print(
            f"{name:<30} {row['ms_median']:>10.3f} {ms_low:>7.3f}-{ms_high:<7.3f} "
            f"{row['ratio_median']:>7.2f} {low:>6.2f}-{high:<6.2f}"
        )
    out = Path(__file__).parent / "results" / "advantage.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"setting": setting, "estimators": rows}, indent=2))


if __name__ == "__main__":
    main()
