"""Benchmark: does AT-GRPO through verl's real stack on CPU lift held-out success, beside the local engine?

Both engines start from one warm-started tiny model (the embedded default's, with 2 attention heads: vLLM's CPU
attention needs a head size of 32) and train the same boards in the same order with the same settings, one
optimizer step per policy per training step (the paper's on-policy setting): the local engine updates on the whole
batch, and verl's `ppo_mini_batch_size` is the most samples one policy can get in a step (verl pads every batch up
to it with zero-mask rows, so the step's samples form exactly one mini-batch). Both save checkpoints every
`--eval-every` steps; every checkpoint of both engines is then evaluated by one evaluator on the same held-out
boards, greedy and sampled at the training temperature with the same random numbers every time, so before/after
and engine/engine differences are paired per board.

    python -m research.verl_learning --router shared --steps 150 --eval-every 25
    python -m research.verl_learning --router lora_per_role --steps 100   # L2: one base, one LoRA adapter per role
    python -m research.verl_learning --plot     # the chart and table of every router's saved JSON

It writes the whole result to runs/verl_learning/ROUTER.json and the page's data, every board's result at every
checkpoint, every run's curve and the median step times, to OUT/ROUTER.json (`--out`, default
runs/verl_learning/data): copied into research/verl_learning/data/ (L2's, lora_per_role*.json, into
research/lora_learning/data/), `python -m research.figures` recomputes the pages.

`--router lora_per_role` is L2: the local engine's `lora_per_role` preset (router per_role, one frozen base with one
LoRA adapter per role) beside verl's `mas.lora_per_role` with the same rank, alpha, target modules and learning rate.
verl's one checkpoint tree holds the base, verl's own never-active adapter `default` and one adapter per role under
peft's names; without `default` it is the local engine's LoRA model, so both engines' checkpoints are loaded into the
evaluator's peft model the same way.
"""

from __future__ import annotations

import argparse
import datetime
import json
from pathlib import Path
from typing import Any

import numpy as np
import torch

from research.verl_cpu.verl_cpu import write_boards
from research.verl_learning.engines import cached, run_local, run_verl, verl_summary, warm_start
from research.verl_learning.readings import (
    PILOT_ABOUT,
    board_strings,
    compact_record,
    curve,
    finite_or_null,
    or_dash,
    paired,
    training_spread,
)
from research.verl_learning.report import plot, print_report
from research.verl_learning.settings import (
    DEFAULT_OUT,
    ENGINES,
    LORA_ROUTER,
    ROUTERS,
    WORK,
    local_config,
    lora_variant,
    pilot_record_name,
    record_name,
    samples_per_policy,
    seed_work,
    targets_variant,
    verl_command,
)
from research.verl_learning.weights import (
    Evaluator,
    base_change,
    local_checkpoints,
    role_adapters_state,
    verl_checkpoints,
)
from verl_mas.cpu_run import CpuRun
from verl_mas.local.policies import LORA_BASE_MODEL
from verl_mas.overrides import apply_overrides


def train_and_evaluate(args: argparse.Namespace) -> Path | None:
    torch.set_num_threads(args.threads)
    root = seed_work(args.seed)
    config = local_config(args, Path(), args.lora_lr[0] if args.lora_lr else None, args.lora_rank, args.lora_targets)
    name = args.router + lora_variant(config)
    work = root / name
    config = apply_overrides(config, {"output_dir": str(work / "local")})
    model = warm_start(args, root)
    write_boards(config, work / "data")
    overrides = verl_command(config, args, model, work / "data", work / "verl")
    runs = {
        "local": lambda: run_local(config, model),
        "verl": lambda: run_verl(overrides, work / "verl", args.timeout, args.stop_at),
    }
    if args.verl_stopped:  # the verl run in the work folder was stopped by hand: summarise what it left
        runs["verl"] = lambda: verl_summary(CpuRun(work / "verl", None, None)) | {"load_average": None}
    engines = {engine: cached(work / f"{engine}.json", runs[engine], args.reuse) for engine in args.engines}
    if args.engines != ENGINES:  # one engine's run, kept in the work folder for a later --reuse
        return None
    spread_runs = {seed: work / f"local_sampler{seed}" for seed in args.local_sampler_seeds}
    for seed, folder in spread_runs.items():  # the same boards and warm start, other samples
        spread_config = apply_overrides(config, {"sampler_seed": seed, "output_dir": str(folder)})
        cached(folder.with_suffix(".json"), lambda c=spread_config: run_local(c, model), args.reuse)
    evaluate = Evaluator(apply_overrides(config, {"model": {"path": str(model)}}), args.eval_samples)
    policies = list(evaluate.run.models)
    checkpoints = {
        "local": local_checkpoints(work / "local" / "checkpoints"),
        "verl": verl_checkpoints(work / "verl" / "checkpoints", policies),
    }
    start = {p: {k: v.clone() for k, v in m.state_dict().items()} for p, m in evaluate.run.models.items()}
    if config.lora.rank:  # verl's tree as the local LoRA model holds it; both engines' bases must not have moved
        adapters = list(evaluate.run.trainers)
        for found in checkpoints["verl"].values():
            found[LORA_BASE_MODEL] = role_adapters_state(found[LORA_BASE_MODEL], adapters)
        for engine, found in checkpoints.items():
            last = found[max(found)][LORA_BASE_MODEL]
            engines[engine]["base_change_max"] = base_change(last, start[LORA_BASE_MODEL])
    warm = evaluate(start)
    boards = {engine: {0: warm} for engine in ENGINES}
    for engine, found in checkpoints.items():
        for step, weights in found.items():
            boards[engine][step] = evaluate(weights)
    spread = {seed: {0: warm} for seed in spread_runs}
    for seed, folder in spread_runs.items():
        for step, weights in local_checkpoints(folder / "checkpoints").items():
            spread[seed][step] = evaluate(weights)
    result = {
        "date": datetime.date.today().isoformat(),
        "command": "python -m research.verl_learning "
        + " ".join(
            f"--{k.replace('_', '-')} {v}"
            for k, v in vars(args).items()
            if k
            not in (
                "plot",
                "reuse",
                "engines",
                "verl_stopped",
                "local_sampler_seeds",
                "local_only",
                "lora_lr",
                "lora_targets",
            )
            and v is not None
        )
        + (f" --lora-lr {args.lora_lr[0]:g}" if args.lora_lr else "")
        + (f" --lora-targets {' '.join(args.lora_targets)}" if args.lora_targets else "")
        + (f" --local-sampler-seeds {' '.join(map(str, spread_runs))}" if spread_runs else ""),
        "router": args.router,
        "seed": args.seed,
        "boards": args.eval_tasks,
        "sampled_episodes_per_board": args.eval_samples,
        "local_torch_threads": args.threads,
        "verl_ppo_mini_batch_size": samples_per_policy(config),
        "verl_overrides": overrides,
        "engines": {engine: engines[engine] | {"curve": curve(boards[engine])} for engine in ENGINES},
        "verl_minus_local": {
            mode: {
                step: paired(np.array(boards["verl"][step][mode]), np.array(boards["local"][step][mode]))
                for step in sorted(set(boards["verl"]) & set(boards["local"]))
            }
            for mode in ("greedy", "sampled")
        },
        "local_sampler_runs": {str(seed): curve(found) for seed, found in spread.items()},
        "training_spread": training_spread(boards, spread),
        "boards_per_step": boards,
    }
    path = root / record_name(name, args.seed)
    path.write_text(json.dumps(finite_or_null(result), indent=1, allow_nan=False))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / path.name).write_text(json.dumps(finite_or_null(compact_record(result)), indent=1, allow_nan=False))
    return path


def local_pilot(args: argparse.Namespace) -> Path:
    """The local engine alone, one run per `--lora-lr` (the same seed, boards and warm start), every checkpoint read by
    the evaluator: which L2 regime learns, before verl's time is spent on one. Writes
    OUT/ROUTER_pilot_seedS[_stepsN].json after every arm, so that an arm cut short loses only itself."""
    torch.set_num_threads(args.threads)
    root = seed_work(args.seed)
    model = warm_start(args, root)
    record: dict[str, Any] = {
        "about": PILOT_ABOUT.format(boards=args.eval_tasks, samples=args.eval_samples),
        "date": datetime.date.today().isoformat(),
        "command": "python -m research.verl_learning --local-only "
        f"--router {args.router} --steps {args.steps} --eval-every {args.eval_every} --seed {args.seed}"
        + (f" --lora-lr {' '.join(f'{lr:g}' for lr in args.lora_lr)}" if args.lora_lr else "")
        + (f" --lora-rank {args.lora_rank}" if args.lora_rank else "")
        + (f" --lora-targets {' '.join(args.lora_targets)}" if args.lora_targets else ""),
        **{key: getattr(args, key) for key in ("router", "seed", "steps")},
        "boards": args.eval_tasks,
        "sampled_episodes_per_board": args.eval_samples,
        "arms": {},
    }
    evaluate = None
    for lr in args.lora_lr or [None]:
        config = local_config(args, Path(), lr, args.lora_rank, args.lora_targets)
        work = root / (args.router + lora_variant(config))
        config = apply_overrides(config, {"output_dir": str(work / "local")})
        work.mkdir(parents=True, exist_ok=True)
        run = cached(work / "local.json", lambda c=config: run_local(c, model), args.reuse)
        if evaluate is None:  # the arms differ in lr only: one evaluator, one reading of the warm start
            evaluate = Evaluator(apply_overrides(config, {"model": {"path": str(model)}}), args.eval_samples)
            start = {p: {k: v.clone() for k, v in m.state_dict().items()} for p, m in evaluate.run.models.items()}
            warm = evaluate(start)
        found = local_checkpoints(work / "local" / "checkpoints")
        boards = {0: warm} | {step: evaluate(weights) for step, weights in found.items()}
        arm = {"lr": config.update.lr, "rank": config.lora.rank, "alpha": config.lora.alpha, "wall_s": run["wall_s"]}
        arm["target_modules"] = list(config.lora.target_modules)
        arm |= {"step_s": run["times"], "board_results": board_strings(boards, args.eval_samples)}
        if config.lora.rank:
            arm["base_change_max"] = base_change(found[max(found)][LORA_BASE_MODEL], start[LORA_BASE_MODEL])
        record["arms"][f"lr {config.update.lr:g}, rank {config.lora.rank}"] = arm
        args.out.mkdir(parents=True, exist_ok=True)
        path = args.out / pilot_record_name(args.router, args.seed, args.steps, targets_variant(config))
        path.write_text(json.dumps(finite_or_null(record), indent=1, allow_nan=False))
        for mode in ("sampled", "greedy"):
            c = paired(np.array(boards[max(boards)][mode]), np.array(warm[mode]))
            print(
                f"{args.router} lr {config.update.lr:g} rank {config.lora.rank} step {max(boards)} {mode} change "
                f"{c['mean']:+.3f} ± {or_dash(c['se'], '.3f')} ({or_dash(c['z'], '+.1f')} SE)",
                flush=True,
            )
    return path


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m research.verl_learning",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--router", choices=ROUTERS, default="shared", help="lora_per_role: L2 (one base, adapters)")
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--eval-every", type=int, default=25)
    parser.add_argument("--tasks-per-step", type=int, default=16)
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--eval-tasks", type=int, default=256)
    parser.add_argument("--eval-samples", type=int, default=2, help="sampled episodes per held-out board")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="torch threads of the local engine and evaluator")
    parser.add_argument("--timeout", type=float, default=4 * 3600, help="seconds; verl's run stops there (partial)")
    parser.add_argument("--engines", nargs="+", choices=ENGINES, default=ENGINES, help="train only these")
    parser.add_argument("--stop-at", type=int, help="stop verl's run once it has saved this step (partial)")
    parser.add_argument("--verl-stopped", action="store_true", help="summarise the verl run stopped in the work folder")
    parser.add_argument(
        "--local-sampler-seeds",
        nargs="*",
        type=int,
        default=[],
        help="also train the local engine with these sampler seeds (same boards and warm start) and evaluate them: "
        "the spread of training runs",
    )
    parser.add_argument(
        "--lora-lr",
        nargs="+",
        type=float,
        help="L2: the adapters' lr instead of the preset's (several only with --local-only: one arm each)",
    )
    parser.add_argument("--lora-rank", type=int, help="L2: the adapters' rank instead of the preset's")
    parser.add_argument(
        "--lora-targets",
        nargs="+",
        help="L2: the modules the adapters wrap instead of the preset's (q_proj k_proj v_proj o_proj)",
    )
    parser.add_argument(
        "--local-only",
        action="store_true",
        help="a pilot: the local engine alone, one run per --lora-lr, into OUT/ROUTER_pilot_seedS[_stepsN].json",
    )
    parser.add_argument("--reuse", action="store_true", help="take finished engine runs from the work folder")
    parser.add_argument(
        "--out",
        type=Path,
        default=DEFAULT_OUT,
        help="folder of the page's data: ROUTER.json (seed 0), ROUTER_seedS.json (default: %(default)s)",
    )
    parser.add_argument("--plot", action="store_true", help="only report and chart the saved results")
    args = parser.parse_args(argv)
    if args.plot:
        paths = [path for path in (WORK / f"{router}.json" for router in ROUTERS) if path.exists()]
        for path in paths:
            print_report(path)
        plot(paths)
        return
    args.engines = tuple(args.engines)
    if (args.lora_lr or args.lora_rank or args.lora_targets) and args.router != LORA_ROUTER:
        parser.error(f"--lora-lr, --lora-rank and --lora-targets set L2's adapters: --router {LORA_ROUTER}")
    if args.lora_targets:
        args.lora_targets = tuple(args.lora_targets)
    if args.lora_lr and len(args.lora_lr) > 1 and not args.local_only:
        parser.error("several --lora-lr values are a pilot's arms: with --local-only")
    if args.local_only:
        local_pilot(args)
        return
    if args.seed in args.local_sampler_seeds:
        parser.error(f"--local-sampler-seeds {args.seed}: the main local run already samples with --seed {args.seed}")
    path = train_and_evaluate(args)
    if path is not None:
        print_report(path)


if __name__ == "__main__":
    main()
