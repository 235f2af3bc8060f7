"""The learning harness: every method (an arm of `verl_mas.local.arms`) on every env and seed, each from its seed's
warm start (the team's or the single agent's), with errors kept as records and finished runs kept, and the report
(`research.learning_report`) rewritten after every run; studies import it."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import shlex
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import torch
from transformers.utils import logging as transformers_logging

from research.learning_report import (
    RESULTS_FILE,
    RunRecord,
    WarmStart,
    aligned,
    compact_runs,
    inside,
    paired_cells,
    paired_differences,
    plot_env,
    setting_items,
    summarize,
    table_cells,
    write_markdown,
)
from research.methods import METHODS, SCRIPT_KEYS, env_config, start_keys
from research.records import RUNS_FILE, write_runs
from verl_mas.local.arms import (
    GREEDY,
    SAMPLED,
    ArmsPlan,
    ensure_warm_start,
    finished_history,
    reached_end,
    saved_run,
    warm_start_run_config,
)
from verl_mas.local.callbacks import RunCallbacks
from verl_mas.local.config import LocalTrainConfig, trains_warm_start
from verl_mas.local.presets import apply_train_overrides
from verl_mas.local.train import train
from verl_mas.overrides import parse_overrides

REPO = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO / "runs" / "learning"  # raw runs stay out of git; a study keeps what its page needs in data/


def prepare_warm_start(config: LocalTrainConfig, agents: str, folder: Path, log: Callable[[str], None]) -> WarmStart:
    """The warm start of the team ("team") or of the single agent ("single") that the runs load, saved in `folder`
    once (`ensure_warm_start`: a folder holding the same key is reused); with model.path given and no
    `warm_start.tune_loaded`, that model is the starting point and nothing is trained. An error becomes the record's.
    """
    if not trains_warm_start(config):
        return WarmStart(config.env, config.seed, agents, config.model.path)
    return saved_warm_start(
        warm_start_run_config(apply_train_overrides(config, start_keys(agents)), folder), agents, log
    )


def saved_warm_start(config: LocalTrainConfig, agents: str, log: Callable[[str], None]) -> WarmStart:
    """`ensure_warm_start` of a warm-start run's config, timed, its exception kept as the record's error."""
    started = time.perf_counter()
    try:
        reused = ensure_warm_start(config, log)
    except Exception as exc:  # reported in the table; the other runs go on
        traceback.print_exc()
        wall_s = time.perf_counter() - started
        return WarmStart(config.env, config.seed, agents, config.output_dir, wall_s, describe(exc))
    wall_s = 0.0 if reused else time.perf_counter() - started
    return WarmStart(config.env, config.seed, agents, config.output_dir, wall_s, reused=reused)


def collected_record(config: LocalTrainConfig, name: str) -> RunRecord:
    """--collect: the run saved under config.output_dir, finished or stopped early (say, by a job's time limit).

    A stopped run reports its last evaluation as `after`; a folder without a run of exactly this config is an error.
    """
    saved = saved_run(config)
    if (history := saved.history) is None:
        error = f"no saved run of this config in {config.output_dir} ({saved.why_not})"
        return RunRecord(config.env, name, config.seed, config.output_dir, error=error)
    record = run_record(config, name, history, reused_wall_s(history))
    if not record.evals:
        record.error = f"no evaluation saved in {config.output_dir}"
    elif not reached_end(config, history):
        record.stopped_at = int(history[-1]["step"])
    return record


def run_record(config: LocalTrainConfig, name: str, history: list[dict[str, Any]], wall_s: float) -> RunRecord:
    record = RunRecord(config.env, name, config.seed, config.output_dir, wall_s)
    record.evals = [(int(row["step"]), row[GREEDY]) for row in history if GREEDY in row]
    record.sampled_evals = [(int(row["step"]), row[SAMPLED]) for row in history if SAMPLED in row]
    return record


def run_method(
    config: LocalTrainConfig, name: str, warm: WarmStart, callbacks: Sequence[RunCallbacks] = ()
) -> RunRecord:
    """train() the method's config from the saved warm start, with `callbacks`; an exception becomes the record's
    error."""
    if warm.error:
        return RunRecord(config.env, name, config.seed, config.output_dir, error=f"warm start failed: {warm.error}")
    started = time.perf_counter()
    try:
        summary = train(config, log=prefixed_log(config.env, config.seed, name), callbacks=callbacks)
    except Exception as exc:  # reported in the table; the other runs go on
        traceback.print_exc()
        wall_s = time.perf_counter() - started
        return RunRecord(config.env, name, config.seed, config.output_dir, wall_s, error=describe(exc))
    return run_record(config, name, summary.history, time.perf_counter() - started)


def reused_wall_s(history: list[dict[str, Any]]) -> float:
    """A reused run's time from its metrics: its steps and evaluations (runs recorded before the evaluation before RL
    was timed leave that one out)."""
    return sum(row.get("time/step_s", 0.0) + row.get("time/eval_s", 0.0) for row in history)


def describe(exc: Exception) -> str:
    return f"{type(exc).__name__}: {exc}"


def prefixed_log(env: str, seed: int, label: str) -> Callable[[str], None]:
    return lambda message: print(f"[{env} seed {seed} {label}] {message}", flush=True)


def parse_with_overrides(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """`parser`'s arguments, with the key=value items as `overrides` and the whole command line as `argv`. The
    key=value items are taken out first, so that they may follow a flag of several values such as --envs."""
    argv = sys.argv[1:] if argv is None else argv
    overrides = [item for item in argv if "=" in item and not item.startswith("-")]
    args = parser.parse_args([item for item in argv if item not in overrides])
    args.overrides, args.argv = overrides, argv
    return args


@dataclass(frozen=True)
class Plan:
    """What one invocation trains (or, with `collect`, reads back) and reports: envs x seeds x methods into `out`.

    `overrides` are key=value training overrides (as for `verl-mas train`); `command` is the command line the report
    names; `baseline` adds every other method's paired difference from it."""

    envs: Sequence[str]
    seeds: Sequence[int]
    methods: Sequence[str]
    out: Path
    command: Sequence[str]
    steps: int | None = None
    presets: Sequence[str] = ("default",)
    overrides: Sequence[str] = ()
    baseline: str | None = None
    collect: bool = False


def arms_plan(env: str, args: argparse.Namespace, command: Sequence[str], overrides: Sequence[str]) -> Plan:
    """The plan of a study comparing arms on one env, from its `parse_with_overrides` arguments (--seeds, --steps,
    --arms, --out, --collect): every arm on every seed, each paired with the first arm."""
    return Plan(
        envs=[env],
        seeds=args.seeds,
        methods=args.arms,
        out=args.out,
        command=command,
        steps=args.steps,
        overrides=overrides,
        baseline=args.arms[0],
        collect=args.collect,
    )


def env_plan(plan: Plan, env: str, config: LocalTrainConfig) -> ArmsPlan:
    """The plan's methods on `env` as arms from one warm start per seed and agents, in OUT/ENV/seedS."""
    arms = {method: METHODS[method].arm for method in plan.methods}
    baseline = plan.baseline or plan.methods[0]
    return ArmsPlan(env, config, arms, tuple(plan.seeds), plan.out.resolve(), baseline, seed_dir=f"{env}/seed{{seed}}")


def run_plan(plan: Plan, callbacks: Sequence[RunCallbacks] = ()) -> list[RunRecord]:
    """Train every (env, seed, method) of `plan` (or --collect them) and write the report; returns the records.
    `callbacks` go to every run's `train` (`verl_mas.local.callbacks`)."""
    transformers_logging.disable_progress_bar()  # no bars for saving and loading the warm-started models
    overrides = parse_overrides(list(plan.overrides))
    taken = [key for key in SCRIPT_KEYS if key in overrides]
    taken += ["env_options.single_agent"] if "single_agent" in overrides.get("env_options", {}) else []
    if taken:
        flags = "--envs, --seeds, --steps, --out, --preset"
        sys.exit(f"research.learning: {', '.join(taken)}: set by the script ({flags})")
    out = plan.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    warm_starts: list[WarmStart] = []
    records: list[RunRecord] = []
    configs: dict[str, LocalTrainConfig] = {}
    for env in plan.envs:
        try:
            configs[env] = env_config(env, list(plan.presets), overrides, plan.steps)
        except ValueError as exc:
            records += [
                RunRecord(env, method, seed, "", error=describe(exc)) for seed in plan.seeds for method in plan.methods
            ]
            lines = write_report(plan, out, configs, records, warm_starts)
            continue
        arms = env_plan(plan, env, configs[env])
        for seed in plan.seeds:
            prepared: dict[str, WarmStart] = {}  # per agents: the warm start this invocation prepared
            for method in plan.methods:
                agents = METHODS[method].agents
                run_config = arms.arm_config(seed, method)
                if plan.collect:
                    records.append(collected_record(run_config, method))
                # the same command stopped earlier: its finished runs are kept
                elif (history := finished_history(run_config)) is not None:
                    prefixed_log(env, seed, method)(f"reusing the finished run in {run_config.output_dir}")
                    records.append(run_record(run_config, method, history, reused_wall_s(history)))
                else:
                    if agents not in prepared:
                        if arms.saves_warm_start:
                            log = prefixed_log(env, seed, f"warm start ({agents})")
                            prepared[agents] = saved_warm_start(arms.warm_start_config(seed, method), agents, log)
                            warm_starts.append(prepared[agents])
                        else:
                            prepared[agents] = WarmStart(env, seed, agents, arms.warm_start_path(seed, method))
                    records.append(run_method(run_config, method, prepared[agents], callbacks))
                # rewritten after every run, so that a stopped command keeps the runs it finished
                lines = write_report(plan, out, configs, records, warm_starts)
    # every env adds records (runs, or its config error) and a report: envs, seeds and methods are non-empty
    print(aligned(lines))
    if plan.baseline:
        print(aligned(paired_cells(paired_differences(records, plan.baseline))))
    print(f"written: {out / RESULTS_FILE}, {out / RUNS_FILE}, {out.with_suffix('.md')}, plots in {out}")
    return records


def write_report(
    plan: Plan,
    out: Path,
    configs: dict[str, LocalTrainConfig],
    records: list[RunRecord],
    warm_starts: list[WarmStart],
) -> list[list[str]]:
    """learning.json, runs.jsonl (the compact records a study's data keep), OUT.md and one plot per env from the runs so
    far; returns the table's cells."""
    rows = summarize(records)
    lines = table_cells(rows)
    pngs = []
    for env, config in configs.items():
        if any(record.env == env and not record.error for record in records):
            pngs.append(out / f"{env}_learning.png")
            plot_env(env, records, config.steps, pngs[-1])
    any_config = next(iter(configs.values()), None)
    report = {
        "command": shlex.join(plan.command),
        "date": datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads"
        + (f", {torch.cuda.get_device_name()}" if torch.cuda.is_available() else ""),
        "settings": {
            "envs": list(plan.envs),
            "seeds": list(plan.seeds),
            "methods": list(plan.methods),
            "steps": any_config.steps if any_config else plan.steps,
            "presets": list(plan.presets),
            "overrides": list(plan.overrides),
            "env_options": {env: dict(config.env_options) for env, config in configs.items()},
            "shared_keys": setting_items(any_config) if any_config else [],
            "configs": {env: json.loads(json.dumps(dataclasses.asdict(c), default=str)) for env, c in configs.items()},
            "warm_start_note": "one warm start per (env, seed, team/single), loaded with model.path by every run; "
            "at_grpo_per_role starts both role models from it",
        },
        "warm_starts": [dataclasses.asdict(w) | {"path": inside(out, w.path)} for w in warm_starts],
        "runs": [dataclasses.asdict(r) | {"output_dir": inside(out, r.output_dir)} for r in records],
        "summary": rows,
        "paired": paired_differences(records, plan.baseline) if plan.baseline else [],
    }
    (out / RESULTS_FILE).write_text(json.dumps(report, indent=2))
    write_runs(out / RUNS_FILE, compact_runs(report, configs, records))
    write_markdown(out.with_suffix(".md"), out, report, lines, pngs)
    return lines
