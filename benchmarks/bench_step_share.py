"""Benchmark: the share of a local training step spent in our own code versus model generation and model update."""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import torch

from verl_mas.env import MultiAgentEnv, StepResult, Task, Workflow
from verl_mas.local.presets import resolve_train_config
from verl_mas.local.train import LocalRun
from verl_mas.overrides import parse_overrides
from verl_mas.rollout import default_env_factory

RESULTS = Path(__file__).parent / "results" / "step_share.json"
SETUP = [
    "tasks_per_step=8",
    "k=4",
    "warm_start.tasks=32",
    "warm_start.epochs=2",
    "progress=false",
    "output_dir=runs/bench_step_share",
]
OURS = ("generator bookkeeping", "environments", "rollout bookkeeping", "advantage", "batch tensors", "step metrics")


class TimedEnv(MultiAgentEnv):
    """Delegates every call to an environment and adds the time it took to a shared clock (clones share it)."""

    def __init__(self, inner: MultiAgentEnv, clock: list[float]) -> None:
        self.inner = inner
        self.clock = clock

    def _timed(self, call, *args):
        started = time.perf_counter()
        try:
            return call(*args)
        finally:
            self.clock[0] += time.perf_counter() - started

    @property
    def blocking_step(self) -> bool:
        return self.inner.blocking_step

    def workflow(self) -> Workflow:
        return self._timed(self.inner.workflow)

    def reset(self, task: Task) -> None:
        self._timed(self.inner.reset, task)

    def observe(self, role: str) -> list[dict[str, str]]:
        return self._timed(self.inner.observe, role)

    def step(self, role: str, text: str) -> StepResult:
        return self._timed(self.inner.step, role, text)

    def clone(self) -> TimedEnv:
        return TimedEnv(self._timed(self.inner.clone), self.clock)

    @property
    def done(self) -> bool:
        return self._timed(lambda: self.inner.done)

    def success(self) -> bool:
        return self._timed(self.inner.success)

    def expert(self, role: str) -> str | None:
        return self._timed(self.inner.expert, role)


def step_parts(metrics: dict[str, float], env_s: float) -> dict[str, float]:
    """Split one step's wall time into parts; the rollout's remainder is our bookkeeping (tree, samples, asyncio)."""
    generation = metrics["time/generation_s"]
    generator_bookkeeping = metrics["time/generator_overhead_s"]
    update = metrics.get("time/update_s", 0.0)
    tensors = metrics.get("time/tensors_s", 0.0)
    advantage = metrics.get("time/advantage_s", 0.0)
    rollout = metrics["time/rollout_s"]
    return {
        "generation (model)": generation,
        "generator bookkeeping": generator_bookkeeping,
        "environments": env_s,
        "rollout bookkeeping": rollout - generation - generator_bookkeeping - env_s,
        "advantage": advantage,
        "batch tensors": tensors,
        "update (model)": update - tensors,
        "step metrics": metrics["time/step_s"] - rollout - advantage - update,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=3, help="measured steps (after one warm-up step)")
    parser.add_argument("overrides", nargs="*", help="key=value training-config overrides (as for verl-mas train)")
    args = parser.parse_args()
    config = resolve_train_config(parse_overrides(SETUP + args.overrides))
    run = LocalRun(config, log=lambda _: None)
    clock = [0.0]

    def timed_env_factory(task: Task) -> TimedEnv:
        started = time.perf_counter()
        env = default_env_factory(task)  # construction and reset count as environment time too
        clock[0] += time.perf_counter() - started
        return TimedEnv(env, clock)

    run.env_factory = timed_env_factory
    run.train_step(0)  # warm-up: first-call allocations and lazy imports
    per_step: list[dict[str, float]] = []
    for step in range(1, args.steps + 1):
        clock[0] = 0.0
        per_step.append(step_parts(run.train_step(step), clock[0]))
    parts = {name: statistics.median(step[name] for step in per_step) for name in per_step[0]}
    total = sum(parts.values())
    ours = sum(parts[name] for name in OURS)
    print(f"{config.env}: {config.tasks_per_step} tasks x K={config.k}, model hidden {config.model.hidden}")
    print(f"median of {args.steps} steps: {total * 1e3:.0f} ms per step")
    print(f"{'part':<24} {'ms':>9} {'share':>7}")
    for name, seconds in parts.items():
        mark = " (ours)" if name in OURS else ""
        print(f"{name:<24} {seconds * 1e3:>9.1f} {seconds / total:>7.1%}{mark}")
    print(f"{'our own code':<24} {ours * 1e3:>9.1f} {ours / total:>7.1%}")
    RESULTS.parent.mkdir(exist_ok=True)
    setup = {
        "env": config.env,
        "env_options": dict(config.env_options),
        "tasks_per_step": config.tasks_per_step,
        "k": config.k,
        "model": {"hidden": config.model.hidden, "layers": config.model.layers},
        "max_new_tokens": config.sampling.max_new_tokens,
        "steps": args.steps,
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "machine": platform.machine(),
    }
    result = {
        "setup": setup,
        "median_s": parts,
        "share": {name: seconds / total for name, seconds in parts.items()},
        "our_code_share": ours / total,
        "per_step_s": per_step,
    }
    RESULTS.write_text(json.dumps(result, indent=2))
    print(f"written to {RESULTS}")


if __name__ == "__main__":
    main()
