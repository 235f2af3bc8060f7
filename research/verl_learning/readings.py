"""The study's numbers: paired changes, curves, the spread of training runs, and the records the page reads."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from research.verl_learning.settings import ENGINES

ABOUT = (
    "Held-out readings of each run on the same {boards} evaluation boards at every checkpoint. boards: per engine and "
    "step, one character per board, greedy solved (0/1) and sampled episodes solved of {samples} (0/1/2). curves: "
    "success per step for the two engines' main runs and the local runs that differ only in sampler seed. step_s: "
    "median step time and its phases (s)."
)
PILOT_ABOUT = (
    "The local engine alone, one run per arm (the same seed, boards and warm start), on the same {boards} held-out "
    "boards at every checkpoint: board_results, per arm and step, one character per board, greedy solved (0/1) and "
    "sampled episodes solved of {samples} (0/1/2). step_s: median step time and its phases (s). base_change_max: the "
    "largest base-weight change from the warm start at the last checkpoint."
)


def paired(after: np.ndarray, before: np.ndarray) -> dict[str, float | None]:
    """Mean of the per-board differences `after - before`, its standard error (sd / sqrt(boards)) and their ratio;
    None (JSON null) where one board leaves no se, or no spread leaves no z."""
    difference = np.asarray(after, dtype=float) - np.asarray(before, dtype=float)
    se = float(difference.std(ddof=1) / math.sqrt(len(difference))) if len(difference) > 1 else None
    mean = float(difference.mean())
    return {"mean": mean, "se": se, "z": mean / se if se and math.isfinite(se) else None}


def finite_or_null(value: Any) -> Any:
    """`value` with every float that is not finite (a NaN reading, an infinite ratio) made None: strict JSON, so that
    a result computed over hours is never lost to the writer refusing it."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: finite_or_null(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [finite_or_null(item) for item in value]
    return value


def or_dash(value: float | None, spec: str) -> str:
    """`value` formatted by `spec`, or "-" for a figure that is not defined (None)."""
    return "-" if value is None else format(value, spec)


def curve(boards: dict[int, dict[str, list[float]]]) -> dict[str, dict]:
    """Per evaluation mode: each step's mean and its paired change from step 0 (mean, se, z)."""
    steps = sorted(boards)
    out = {}
    for mode in ("greedy", "sampled"):
        start = np.array(boards[0][mode])
        out[mode] = {
            "steps": steps,
            "success": [float(np.mean(boards[s][mode])) for s in steps],
            "change": [paired(np.array(boards[s][mode]), start) for s in steps],
        }
    return out


def training_spread(boards: dict[str, dict[int, dict]], spread: dict[int, dict[int, dict]]) -> dict[str, list[dict]]:
    """Per mode and checkpoint: the held-out success of every local run (the main one and each sampler seed's, which
    differ in their training samples only), their mean and sd, verl's reading, and how many local sds it lies from
    their mean: the spread two training runs of one engine show, to read the engines' difference against."""
    runs = [boards["local"], *spread.values()]
    out = {}
    for mode in ("greedy", "sampled"):
        rows = []
        for step in sorted(set(boards["verl"]).intersection(*runs)):
            local = [float(np.mean(run[step][mode])) for run in runs]
            verl = float(np.mean(boards["verl"][step][mode]))
            sd = float(np.std(local, ddof=1)) if len(local) > 1 else None
            mean = float(np.mean(local))
            rows.append(
                {
                    "step": step,
                    "local": local,
                    "local_mean": mean,
                    "local_sd": sd,
                    "verl": verl,
                    "verl_in_local_sds": (verl - mean) / sd if sd else None,
                }
            )
        out[mode] = rows
    return out


def compact_record(result: dict[str, Any]) -> dict[str, Any]:
    """What the page's figures read from a whole result: every board's reading at every checkpoint of both engines as
    one character a board (greedy 0/1, sampled the episodes solved), every run's curve, the median step times."""
    samples = result["sampled_episodes_per_board"]
    scale = {"greedy": 1, "sampled": samples}
    curves = {engine: result["engines"][engine]["curve"] for engine in ENGINES}
    curves |= {f"local, sampler seed {seed}": curve for seed, curve in result["local_sampler_runs"].items()}
    return {
        "about": ABOUT.format(boards=result["boards"], samples=samples),
        **{key: result[key] for key in ("date", "command", "router", "seed", "boards", "sampled_episodes_per_board")},
        "steps": curves["local"]["greedy"]["steps"],
        "board_results": {
            engine: board_strings(by_step, samples) for engine, by_step in result["boards_per_step"].items()
        },
        "curves": {name: {mode: curve[mode]["success"] for mode in scale} for name, curve in curves.items()},
        "step_s": {engine: result["engines"][engine]["times"] for engine in ENGINES},
        **({"validity": validity} if (validity := lora_validity(result)) else {}),
    }


def board_strings(by_step: dict[int, dict[str, list[float]]], samples: int) -> dict[int, dict[str, str]]:
    """Each step's readings as one character a board: greedy solved (0/1), sampled the episodes solved (0..samples)."""
    scale = {"greedy": 1, "sampled": samples}
    return {
        step: {mode: "".join(str(round(v * scale[mode])) for v in reading[mode]) for mode in scale}
        for step, reading in by_step.items()
    }


def lora_validity(result: dict[str, Any]) -> dict[str, Any] | None:
    """An L2 result's checks, None for the other routers: each engine's largest base-weight change from the warm start
    at its last checkpoint, and verl's largest sampler-vs-actor gaps (the guard's per role, verl's own)."""
    engines = result["engines"]
    if "base_change_max" not in engines["local"]:
        return None
    verl = engines["verl"]
    return {
        "base_change_max": {engine: engines[engine]["base_change_max"] for engine in ENGINES},
        "logprob_gap_max": verl["logprob_gap_max"],
        "rollout_probs_diff_max": verl["rollout_probs_diff_max"],
    }
