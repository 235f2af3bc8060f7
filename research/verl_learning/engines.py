"""Running each engine: the local run, verl's CPU run and its summary, step times, load, cached runs, warm start."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import threading
import time
from collections.abc import Callable
from pathlib import Path

from research.verl_learning.readings import finite_or_null
from research.verl_learning.settings import local_config
from verl_mas.cpu_run import CpuRun, run_on_cpu
from verl_mas.local.config import LocalTrainConfig
from verl_mas.local.export import export_policies
from verl_mas.local.train import train
from verl_mas.overrides import apply_overrides

LOCAL_TIMES = {
    "generation": "time/generation_s",
    "old_log_prob": None,  # recomputed inside the local update
    "advantage": "time/advantage_s",
    "update": "time/update_s",
    "step": "time/step_s",
}
VERL_TIMES = {
    "generation": "timing_s/gen",
    "old_log_prob": "timing_s/old_log_prob",
    "advantage": "timing_s/adv",
    "update": "timing_s/update_actor",
    "step": "timing_s/step",
}


def median_times(rows: list[dict], names: dict[str, str | None]) -> dict[str, float | None]:
    """The median of each timing over the steps after the first (None for a phase the engine does not time)."""
    later = rows[1:] or rows
    return {
        phase: statistics.median(row[key] for row in later if key in row) if key and later else None
        for phase, key in names.items()
    }


class LoadSampler:
    """Reads the 1-minute load average every `period` seconds on a thread until stopped."""

    def __init__(self, period: float = 30.0) -> None:
        self.period = period
        self.readings: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> LoadSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while True:
            self.readings.append(os.getloadavg()[0])
            if self._stop.wait(self.period):
                return

    def summary(self) -> dict[str, float | None]:
        values = self.readings
        if not values:  # a run shorter than one period: nothing was read
            return {"min": None, "median": None, "max": None, "readings": 0}
        return {"min": min(values), "median": statistics.median(values), "max": max(values), "readings": len(values)}


def run_local(config: LocalTrainConfig, model: Path) -> dict:
    started = time.monotonic()
    with LoadSampler() as load:
        summary = train(apply_overrides(config, {"model": {"path": str(model)}}), log=lambda _: None)
    rows = [row for row in summary.history if "time/step_s" in row]
    return {
        "wall_s": time.monotonic() - started,
        "load_average": load.summary(),
        "times": median_times(rows, LOCAL_TIMES),
        "greedy_before_after": [summary.eval_success_before, summary.eval_success_after],
    }


def saved_step(checkpoints: Path) -> int:
    """The last step every policy of a verl run has checkpointed under `checkpoints` (0: none)."""
    markers = list(checkpoints.glob("**/latest_checkpointed_iteration.txt"))
    return min((int(m.read_text().strip() or 0) for m in markers), default=0)


def run_verl(overrides: list[str], out: Path, timeout: float, stop_at: int | None) -> dict:
    """verl's run; one stopped by `timeout`, or once every policy has saved step `stop_at`, counts as partial:
    its checkpoints so far are evaluated."""
    started = time.monotonic()
    stop = (lambda: saved_step(out / "checkpoints") >= stop_at) if stop_at else None
    with LoadSampler() as load:
        try:
            run = run_on_cpu(out, overrides, timeout, kill_when=stop, audit=True)
        except TimeoutError:
            run = CpuRun(out, None, time.monotonic() - started)
    if run.returncode not in (0, None):
        raise SystemExit(f"the verl run failed ({run.returncode}); see {run.folder / 'log.txt'}")
    return verl_summary(run) | {"load_average": load.summary()}


def verl_summary(run: CpuRun) -> dict:
    """What a verl run's folder says: steps done, median phase times, its own validations, the rows each update
    received (padding included), the sampler-vs-actor probability gap."""
    logged = run.metrics()
    steps = [row["data"] for row in logged if "timing_s/step" in row["data"]]
    validation = {
        row["step"]: value
        for row in logged
        for key, value in row["data"].items()
        if key.startswith("val-core/") and "/acc/" in key
    }
    rows_per_update = sorted({len(record["rows"]) for record in run.audit()})
    # one gap per step and policy: verl logs it unprefixed for one policy, as policy/<id>/training/... for several
    probs_gap = [
        value for row in steps for key, value in row.items() if key.endswith("training/rollout_probs_diff_max")
    ]
    guard_gap: dict[str, float] = {}  # the on-policy guard's measure per role (mas/<role>/logprob_gap), its largest
    for row in steps:
        for key, value in row.items():
            parts = key.split("/")
            if len(parts) == 3 and parts[0] == "mas" and parts[2] == "logprob_gap":
                guard_gap[parts[1]] = max(guard_gap.get(parts[1], value), value)
    return {
        "wall_s": run.wall_s,
        "stopped_early": run.returncode is None,
        "steps_done": max((row["step"] for row in logged if "timing_s/step" in row["data"]), default=0),
        "times": median_times(steps, VERL_TIMES),
        "own_greedy_validation": validation,
        "rows_per_update": rows_per_update,
        "rollout_probs_diff_max": [min(probs_gap), max(probs_gap)] if probs_gap else None,
        "logprob_gap_max": guard_gap,
    }


def cached(path: Path, compute: Callable[[], dict], reuse: bool) -> dict:
    """`compute()`, saved to `path`; with `reuse`, what `path` holds already (a run trained earlier)."""
    if reuse and path.exists():
        return json.loads(path.read_text())
    value = compute()
    path.write_text(json.dumps(finite_or_null(value), indent=1, allow_nan=False))
    return value


def warm_start(args: argparse.Namespace, root: Path) -> Path:
    """The seed's warm start, every router's and every L2 regime's one: a whole shared model, exported once."""
    model = root / "model"
    if not model.exists():
        whole = {"router": "shared", "lora": {"rank": 0}}
        export_policies(apply_overrides(local_config(args, root / "warm_start"), whole), model)
    return model
