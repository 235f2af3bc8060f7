"""Benchmark: at_grpo (grouped by uid, and by uid/role/turn) against verl's grpo_vectorized on one batch."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import torch
from verl.trainer.ppo.core_algos import compute_grpo_vectorized_outcome_advantage

from verl_mas.advantage import compute_at_grpo_advantage

BATCH, LENGTH, GROUP = 4096, 512, 8
REPEATS = 20


def best_time(fn, repeats: int = REPEATS) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    torch.manual_seed(0)
    rewards = torch.zeros(BATCH, LENGTH)
    lengths = torch.randint(1, LENGTH + 1, (BATCH,))
    mask = (torch.arange(LENGTH)[None, :] < lengths[:, None]).float()
    rewards[torch.arange(BATCH), lengths - 1] = torch.randn(BATCH)
    # a verl-style uid per group of 8, and the same batch as 2 roles x 4 turns per task
    uid = np.array([f"task-{i // GROUP:05d}" for i in range(BATCH)], dtype=object)
    task_uid = np.array([f"task-{i // (GROUP * 8):05d}" for i in range(BATCH)], dtype=object)
    role = np.array(["tool" if (i // GROUP) % 2 == 0 else "plan" for i in range(BATCH)], dtype=object)
    turn = np.array([(i // (GROUP * 2)) % 4 for i in range(BATCH)], dtype=np.int64)

    baseline = best_time(lambda: compute_grpo_vectorized_outcome_advantage(rewards, mask, uid))
    by_uid = best_time(lambda: compute_at_grpo_advantage(rewards, mask, uid))
    by_key = best_time(lambda: compute_at_grpo_advantage(rewards, mask, task_uid, role=role, turn=turn))
    ours, _ = compute_at_grpo_advantage(rewards, mask, task_uid, role=role, turn=turn)
    theirs, _ = compute_grpo_vectorized_outcome_advantage(rewards, mask, uid)
    assert torch.allclose(ours, theirs, atol=1e-5), "the two groupings describe the same groups"

    rows = {
        "grpo_vectorized (verl), uid": baseline,
        "at_grpo, uid": by_uid,
        "at_grpo, (task, role, turn)": by_key,
    }
    print(f"batch {BATCH} x {LENGTH}, groups of {GROUP}, best of {REPEATS}")
    print(f"{'estimator':<32} {'ms':>8} {'ratio':>7}")
    for name, seconds in rows.items():
        print(f"{name:<32} {seconds * 1e3:>8.2f} {seconds / baseline:>7.2f}")
    out = Path(__file__).parent / "results" / "advantage.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({k: {"ms": v * 1e3, "ratio": v / baseline} for k, v in rows.items()}, indent=2))


if __name__ == "__main__":
    main()
