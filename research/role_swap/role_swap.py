"""The role-swap probe (research/role_swap/README.md): `per_role` runs of the default setting, each final checkpoint
evaluated as trained and with its two roles' models swapped, greedy and sampled.

    OMP_NUM_THREADS=1 python -m research.role_swap --seeds 0 1 2 --steps 100
    python -m research.role_swap --seeds 0 1 2 --collect     # train nothing: evaluate the saved checkpoints

Each seed trains `verl-mas train preset=per_role seed=S steps=STEPS checkpoint_every=STEPS` into RUNS/seed_S (a
seed whose run folder already holds a checkpoint is not trained again), then evaluates that checkpoint four times
(`verl-mas eval`, with and without `swap_roles=true`, greedy and sampled as the run's own evaluation samples) and
writes OUT/role_swap.json: per seed, the four readings, each role's invalid share and the run's own final evaluation.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, dataclass
from pathlib import Path

from research.role_swap.figures import RESULT_FILE, ROLES
from verl_mas.local.checkpoint import latest_checkpoint
from verl_mas.local.config import CONFIG_FILE, LocalTrainConfig, read_config
from verl_mas.local.evaluate import EvalConfig, evaluate
from verl_mas.local.presets import resolve_train_config
from verl_mas.local.train import CHECKPOINT_DIR, train

DEFAULT_RUNS = Path("runs/role_swap")


@dataclass(frozen=True)
class Reading:
    """One evaluation of a checkpoint: its success and each role's share of invalid replies."""

    served_by: dict[str, str]
    success: float
    episodes: int
    invalid_share: dict[str, float]


@dataclass(frozen=True)
class SeedResult:
    """One seed's run: its own evaluations before RL and at the end (from metrics.jsonl), and the probe's four
    readings of its final checkpoint."""

    seed: int
    step: int
    run_greedy_before: float
    run_sampled_before: float
    run_greedy: float
    run_sampled: float
    readings: dict[str, Reading]  # "greedy" / "greedy_swapped" / "sampled" / "sampled_swapped"


def run_folder(runs: Path, seed: int) -> Path:
    return runs / f"seed_{seed}"


def saved_checkpoint(folder: Path) -> Path | None:
    """The latest checkpoint of the run in `folder`, or None."""
    return latest_checkpoint(folder / CHECKPOINT_DIR)


def train_seed(runs: Path, seed: int, steps: int) -> Path:
    """The run's final checkpoint, trained first unless its folder holds one already."""
    folder = run_folder(runs, seed)
    if saved_checkpoint(folder) is None:
        overrides = {
            "preset": "per_role",
            "seed": seed,
            "steps": steps,
            "checkpoint_every": steps,
            "output_dir": str(folder),
            "progress": False,
        }
        train(resolve_train_config(overrides))
    checkpoint = saved_checkpoint(folder)
    if checkpoint is None:
        raise RuntimeError(f"{folder}: no checkpoint after training")
    return checkpoint


def reading_name(sampled: bool, swapped: bool) -> str:
    """"greedy", "greedy_swapped", "sampled" or "sampled_swapped": a reading's key in the results."""
    return ("sampled" if sampled else "greedy") + ("_swapped" if swapped else "")


def read(config: LocalTrainConfig, checkpoint: Path, sampled: bool, swapped: bool) -> Reading:
    """`verl-mas eval checkpoint=... [swap_roles=true]`, greedy or sampled as the run's own evaluation samples."""
    name = reading_name(sampled, swapped)
    eval_config = EvalConfig(
        checkpoint=str(checkpoint),
        samples=config.eval_samples if sampled else 1,
        temperature=config.sampling.temperature if sampled else 0.0,
        json=str(checkpoint / f"role_swap_{name}.json"),
        swap_roles=swapped,
    )
    report = evaluate(config, eval_config, checkpoint)
    return Reading(
        served_by=report.served_by,
        success=report.success[config.env],
        episodes=report.tasks * report.samples,
        invalid_share={role: report.metrics[f"eval/{role}/invalid_move_share"] for role in ROLES},
    )


def probe_seed(runs: Path, seed: int, steps: int, collect: bool) -> SeedResult:
    checkpoint = saved_checkpoint(run_folder(runs, seed)) if collect else None
    if checkpoint is None:
        if collect:
            raise RuntimeError(f"--collect: {run_folder(runs, seed)} holds no checkpoint; run without --collect")
        checkpoint = train_seed(runs, seed, steps)
    config = read_config(checkpoint / CONFIG_FILE)
    history = [json.loads(line) for line in (run_folder(runs, seed) / "metrics.jsonl").read_text().splitlines()]
    before, final = history[0], history[-1]
    readings = {
        reading_name(sampled, swapped): read(config, checkpoint, sampled, swapped)
        for sampled in (False, True)
        for swapped in (False, True)
    }
    return SeedResult(
        seed=seed,
        step=int(final["step"]),
        run_greedy_before=before["eval/success"],
        run_sampled_before=before["eval_sampled/success"],
        run_greedy=final["eval/success"],
        run_sampled=final["eval_sampled/success"],
        readings=readings,
    )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m research.role_swap", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=100, help="AT-GRPO steps per run (default 100)")
    parser.add_argument("--runs", type=Path, default=DEFAULT_RUNS, help="run folders (default: runs/role_swap)")
    parser.add_argument("--out", type=Path, help="where role_swap.json goes (default: RUNS/data)")
    parser.add_argument("--collect", action="store_true", help="train nothing: evaluate the saved checkpoints")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    results = [probe_seed(args.runs, seed, args.steps, args.collect) for seed in args.seeds]
    out = args.out or args.runs / "data"
    out.mkdir(parents=True, exist_ok=True)
    (out / RESULT_FILE).write_text(json.dumps([asdict(r) for r in results], indent=1) + "\n")
    print(f"written: {out / RESULT_FILE}")


if __name__ == "__main__":
    main()
