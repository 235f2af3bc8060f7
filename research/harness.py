"""The learning harness: one warm start per (env, seed, team or single agent), every method's run from it, and the
table of held-out success (greedy and sampled) before and after RL, with paired differences; studies import it."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import shlex
import statistics
import sys
import time
import traceback
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import torch
from transformers.utils import logging as transformers_logging

from research.records import RUNS_FILE, RunCurves, write_runs
from verl_mas.local.callbacks import RunCallbacks
from verl_mas.local.config import (
    CONFIG_FILE,
    LocalTrainConfig,
    WarmStartConfig,
    config_json,
    read_config,
    resolved_warm_start,
    trains_warm_start,
)
from verl_mas.local.presets import apply_train_overrides, resolve_train_config
from verl_mas.local.reporting import read_metrics
from verl_mas.local.train import LocalRun, train
from verl_mas.local.warm_start import warm_start_env_options
from verl_mas.overrides import parse_overrides
from verl_mas.stats import difference_summary, interval_text, markdown_table, mean_se_text

REPO = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO / "runs" / "learning"  # raw runs stay out of git; a study keeps what its page needs in data/
RESULTS_FILE = "learning.json"
WARM_START_KEY_FILE = "warm_start_key.json"
# Small boards and compact tool mode (the tool agent proposes moves instead of writing programs); the grid envs also
# drop the rules' prose from their prompts, which tiny models learn from the warm start anyway.
ENV_OPTIONS: dict[str, dict[str, Any]] = {
    "plan_path": {"size": 5, "wall_ratio": 0.2, "tool_mode": "compact", "max_turns": 3, "brief_prompts": True},
    "sokoban": {"size": 5, "boxes": 1, "tool_mode": "compact", "max_turns": 3, "brief_prompts": True},
    "sudoku": {"size": 4, "tool_mode": "compact", "max_turns": 3, "brief_prompts": True},
    # two one-digit terms: the tool agent's program and the reasoner's box must agree
    "math": {
        "brief_prompts": True,
        "source_options": {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1},
        "max_turns": 2,
    },
    # one operation on two integers: the coder's stdin program, the tester's cases; the generated tasks bring their
    # own known-wrong programs, so no mutant needs verifying in the sandbox
    "code": {
        "brief_prompts": True,
        "source_options": {"terms": 1, "variables": 2},
        "max_turns": 2,
        "wrong_programs": 0,
    },
}
# Training keys an env needs under every preset (presets and overrides still apply on top): a 4x4 grid in
# <answer></answer> is 29 tokens with eos, more than the default's 24.
ENV_KEYS: dict[str, dict[str, Any]] = {
    "sudoku": {"sampling": {"max_new_tokens": 32}},
    # a program printing the expression is up to about 30 tokens; the warm start corrupts only the reasoner's played
    # moves, so its data holds second turns where the reasoner copies the tool's printed answer
    "math": {
        "sampling": {"max_new_tokens": 40},
        "warm_start": {"tasks": 1024, "epochs": 8, "corrupt_roles": ["reasoner"]},
    },
    # a two-line stdin program in a fence is about 48 tokens; only the coder's played moves are corrupted
    "code": {
        "sampling": {"max_new_tokens": 72},
        "warm_start": {"tasks": 1024, "epochs": 8, "corrupt_roles": ["coder"]},
    },
}
# Keys each run's config gets from the script (its flags or the method), not from key=value overrides.
SCRIPT_KEYS = ("env", "seed", "steps", "output_dir", "router", "grouping", "rollout_mode", "resume", "preset")


@dataclass(frozen=True)
class Method:
    """One row of the table: which warm start it starts from and the training keys that define it."""

    description: str
    team: bool  # two agents; false: env_options.single_agent=true
    overrides: Mapping[str, Any]
    trains: bool = True  # false: no RL steps, only the evaluation of the warm-started model
    # env options of the RL run only (rewards): the warm start, which never reads a reward, stays the arms' shared one
    env_options: Mapping[str, Any] = field(default_factory=dict)


# AT-GRPO as the paper runs it, one model shared by both roles: at_grpo_shared, and the arms that change one thing of it
AT_GRPO_SHARED: dict[str, Any] = {"router": "shared", "rollout_mode": "tree", "grouping": "task_role_turn"}

METHODS: dict[str, Method] = {
    "mas_no_rl": Method("two agents, the warm-started model without RL (steps 0)", True, {"router": "shared"}, False),
    "single_grpo": Method(
        "one agent, GRPO: K independent episodes per task, grouped per task",
        False,
        {"router": "shared", "rollout_mode": "independent", "grouping": "task"},
    ),
    "at_grpo_shared": Method(
        "two agents, AT-GRPO tree, groups per (task, role, turn), one model shared by both roles",
        True,
        AT_GRPO_SHARED,
    ),
    "at_grpo_per_role": Method(
        "two agents, AT-GRPO tree, groups per (task, role, turn), one model per role",
        True,
        {"router": "per_role", "rollout_mode": "tree", "grouping": "task_role_turn"},
    ),
    "mas_grpo_task": Method(
        "two agents, AT-GRPO tree, but plain GRPO groups per task, one shared model",
        True,
        {"router": "shared", "rollout_mode": "tree", "grouping": "task"},
    ),
    # the grouping ablation's other arms (research.grouping); not in the paper's table, so not run by default
    "at_grpo_task_role": Method(
        "two agents, AT-GRPO tree, groups per (task, role): per-agent normalisation, one shared model",
        True,
        {"router": "shared", "rollout_mode": "tree", "grouping": "task_role"},
    ),
    "mas_no_tree": Method(
        "two agents, K independent episodes per task (no tree), groups per (task, role, turn) across them, one "
        "shared model",
        True,
        {"router": "shared", "rollout_mode": "independent", "grouping": "task_role_turn"},
    ),
    # at_grpo_shared held near its starting model (the warm start) by verl's KL loss; the coefficient is the
    # command's update.kl_coef (the other methods leave use_kl_loss off, so it changes nothing else)
    "at_grpo_shared_kl": Method(
        "two agents, AT-GRPO tree, groups per (task, role, turn), one shared model, with a KL loss to the warm start "
        "(update.use_kl_loss=true; update.kl_coef from the command)",
        True,
        AT_GRPO_SHARED | {"update": {"use_kl_loss": True}},
    ),
    # the code tester's reward rules (docs/code.md; research.code_tester): at_grpo_shared with one or the other
    "at_grpo_credit_share": Method(
        "two agents, AT-GRPO tree, groups per (task, role, turn), one shared model; the code tester earns the share "
        "of its cases that a correct program passes and some known-wrong program fails (tester_reward=credit_share)",
        True,
        AT_GRPO_SHARED,
        env_options={"tester_reward": "credit_share"},
    ),
    "at_grpo_catch_share": Method(
        "two agents, AT-GRPO tree, groups per (task, role, turn), one shared model; the code tester earns the share "
        "of known-wrong programs its valid cases catch, minus 1 per case a correct program fails, never below -0.25 "
        "(tester_reward=catch_share)",
        True,
        AT_GRPO_SHARED,
        env_options={"tester_reward": "catch_share"},
    ),
    # at_grpo_catch_share with each group's rewards only centred (verl's norm_adv_by_std_in_grpo=false): a group whose
    # rewards differ by little (replies near the tester's floor) then moves the policy by little
    "at_grpo_catch_share_centred": Method(
        "at_grpo_catch_share with advantages centred on the group's mean, not divided by its std "
        "(norm_adv_by_std=false)",
        True,
        AT_GRPO_SHARED | {"norm_adv_by_std": False},
        env_options={"tester_reward": "catch_share"},
    ),
}
# The paper's table: what runs without --methods.
DEFAULT_METHODS = ("mas_no_rl", "single_grpo", "at_grpo_shared", "at_grpo_per_role", "mas_grpo_task")


@dataclass
class WarmStart:
    """A warm-started model and tokenizer saved for the runs of one (env, seed, team or single agent)."""

    env: str
    seed: int
    agents: str  # "team" or "single"
    path: str
    wall_s: float = 0.0
    error: str = ""
    reused: bool = False  # loaded from an earlier invocation's folder (same key): not trained here


@dataclass
class RunRecord:
    """One method's run on one env and seed: held-out success at each evaluation, or the error that stopped it."""

    env: str
    method: str
    seed: int
    output_dir: str
    wall_s: float = 0.0
    evals: list[tuple[int, float]] = field(default_factory=list)  # (step, held-out success, greedy)
    sampled_evals: list[tuple[int, float]] = field(default_factory=list)  # (step, success at the training temperature)
    error: str = ""
    stopped_at: int | None = None  # --collect: the last step of a run that stopped before config.steps

    @property
    def before(self) -> float:
        return self.evals[0][1]

    @property
    def after(self) -> float:
        return self.evals[-1][1]


def env_config(env: str, presets: list[str], overrides: Mapping[str, Any], steps: int | None) -> LocalTrainConfig:
    """The config every run on `env` shares: the script's env options, the presets, the overrides, the step budget."""
    base = dataclasses.replace(LocalTrainConfig(), env=env, env_options=ENV_OPTIONS.get(env, {}))
    base = apply_train_overrides(base, ENV_KEYS.get(env, {}))
    config = resolve_train_config({"preset": presets, **overrides}, base)
    return config if steps is None else apply_train_overrides(config, {"steps": steps})


def warm_start_run_config(config: LocalTrainConfig, single_agent: bool, folder: Path) -> LocalTrainConfig:
    """The config of the run that warm-starts one whole model on every role's expert moves into `folder`."""
    overrides = {
        "router": "shared",
        "lora": {"rank": 0},
        "env_options": {"single_agent": single_agent},
        "output_dir": str(folder),
    }
    return apply_train_overrides(config, overrides)


def warm_start_key(config: LocalTrainConfig) -> str:
    """What a saved warm start depends on: a folder whose key file holds the same text is reused, not retrained.

    It plays the boards of `warm_start_env_options`, so one warm start serves every RL board size that shares them."""
    key = {
        "env": config.env,
        "env_options": warm_start_env_options(config),
        "seed": config.seed,
        "model": config.model,
        "warm_start": warm_start_text(dataclasses.replace(resolved_warm_start(config), env_options={})),
    }
    return json.dumps(key, indent=2, sort_keys=True, default=str)


# Warm-start keys added after warm starts were first saved, with the default that plays as the code did before them:
# left out of the key at that default, so that a warm start saved before them is still found.
LATER_WARM_START_KEYS = {"near_misses": 0.0, "tune_loaded": False}


def warm_start_text(warm_start: WarmStartConfig) -> str:
    """The warm-start settings as the key shows them: the dataclass's repr, less `LATER_WARM_START_KEYS` at their
    defaults."""
    shown = [
        f"{f.name}={getattr(warm_start, f.name)!r}"
        for f in dataclasses.fields(warm_start)
        if LATER_WARM_START_KEYS.get(f.name, object()) != getattr(warm_start, f.name)
    ]
    return f"{type(warm_start).__name__}({', '.join(shown)})"


def save_warm_start(config: LocalTrainConfig, folder: Path, log: Callable[[str], None]) -> None:
    """Warm-start one whole model and save it with its tokenizer and its key file to `folder`."""
    run = LocalRun(config, log)
    (model,) = run.models.values()
    model.save_pretrained(folder)
    run.tokenizer.save_pretrained(str(folder))
    (folder / WARM_START_KEY_FILE).write_text(warm_start_key(config))


def prepare_warm_start(config: LocalTrainConfig, agents: str, folder: Path, log: Callable[[str], None]) -> WarmStart:
    """The warm start the runs load; with model.path given and no `warm_start.tune_loaded`, that model is the
    starting point and nothing is trained.

    A warm start already saved in `folder` with the same key (env, options, seed, model, warm-start settings) is
    reused.
    """
    if not trains_warm_start(config):
        return WarmStart(config.env, config.seed, agents, config.model.path)
    warm_config = warm_start_run_config(config, agents == "single", folder)
    key_file = folder / WARM_START_KEY_FILE
    if key_file.is_file() and key_file.read_text() == warm_start_key(warm_config):
        log(f"reusing the warm start in {folder}")
        return WarmStart(config.env, config.seed, agents, str(folder), reused=True)
    started = time.perf_counter()
    try:
        save_warm_start(warm_config, folder, log)
    except Exception as exc:  # reported in the table; the other runs go on
        traceback.print_exc()
        return WarmStart(config.env, config.seed, agents, str(folder), time.perf_counter() - started, describe(exc))
    return WarmStart(config.env, config.seed, agents, str(folder), time.perf_counter() - started)


def method_config(config: LocalTrainConfig, name: str, warm_path: str, folder: Path) -> LocalTrainConfig:
    """The config of one method's run: the env's config, the method's keys, the warm start and the run's folder."""
    method = METHODS[name]
    overrides = {
        **method.overrides,
        "env_options": {**method.env_options, "single_agent": not method.team},
        "model": {"path": warm_path},
        "warm_start": {"tune_loaded": False},  # the start is tuned already: every method loads it as it is
        "output_dir": str(folder),
    }
    if not method.trains:
        overrides["steps"] = 0
    return apply_train_overrides(config, overrides)


@dataclass(frozen=True)
class SavedRun:
    """What config.output_dir holds for a config: the run's metrics, or why it holds no run of exactly that config."""

    history: list[dict[str, Any]] | None
    why_not: str | None = None


def flat_keys(value: Any, prefix: str = "") -> dict[str, Any]:
    """A JSON value's leaves by dotted key (`update.lr`); an empty object is a leaf."""
    if not isinstance(value, dict) or not value:
        return {prefix: value}
    leaves: dict[str, Any] = {}
    for key, item in value.items():
        leaves |= flat_keys(item, f"{prefix}.{key}" if prefix else key)
    return leaves


def config_differences(saved: LocalTrainConfig, wanted: LocalTrainConfig) -> list[str]:
    """The dotted keys whose values differ between two configs (one side missing a key counts)."""
    had, want = flat_keys(json.loads(config_json(saved))), flat_keys(json.loads(config_json(wanted)))
    missing = object()
    return sorted(key for key in had.keys() | want.keys() if had.get(key, missing) != want.get(key, missing))


def saved_run(config: LocalTrainConfig) -> SavedRun:
    """The metrics a run of exactly this config saved in config.output_dir, finished or not; else why not.

    The saved config is read back through `read_config`, so a run saved before a key existed counts as run with that
    key's default (a new key's default keeps what the code did before it)."""
    folder = Path(config.output_dir)
    try:
        saved = read_config(folder / CONFIG_FILE)
        history = read_metrics(folder)
    except (OSError, ValueError) as exc:  # a missing file, unreadable JSON, or a key this code no longer knows
        return SavedRun(None, str(exc))
    if config_json(saved) != config_json(config):
        differing = config_differences(saved, config) or ["the order of keys or the form of numbers only"]
        return SavedRun(None, "its saved config differs at " + ", ".join(differing))
    return SavedRun(history)


def is_finished(config: LocalTrainConfig, history: list[dict[str, Any]]) -> bool:
    return bool(history) and history[-1].get("step") == config.steps and "eval/success" in history[-1]


def finished_history(config: LocalTrainConfig) -> list[dict[str, Any]] | None:
    """The metrics of a run that already finished in config.output_dir with exactly this config, else None."""
    history = saved_run(config).history
    return history if history is not None and is_finished(config, history) else None


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
    elif not is_finished(config, history):
        record.stopped_at = int(history[-1]["step"])
    return record


def run_record(config: LocalTrainConfig, name: str, history: list[dict[str, Any]], wall_s: float) -> RunRecord:
    record = RunRecord(config.env, name, config.seed, config.output_dir, wall_s)
    record.evals = [(int(row["step"]), row["eval/success"]) for row in history if "eval/success" in row]
    record.sampled_evals = [
        (int(row["step"]), row["eval_sampled/success"]) for row in history if "eval_sampled/success" in row
    ]
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
    """A reused run's time from its metrics: its steps and evaluations (the first evaluation is not timed)."""
    return sum(row.get("time/step_s", 0.0) + row.get("time/eval_s", 0.0) for row in history)


def describe(exc: Exception) -> str:
    return f"{type(exc).__name__}: {exc}"


def inside(out: Path, path: str) -> str:
    """`path` relative to the output folder when it lies in it, so that the JSON does not name this machine's paths."""
    return os.path.relpath(path, out) if path and Path(path).is_relative_to(out) else path


def prefixed_log(env: str, seed: int, label: str) -> Callable[[str], None]:
    return lambda message: print(f"[{env} seed {seed} {label}] {message}", flush=True)


def summarize(records: list[RunRecord]) -> list[dict[str, Any]]:
    """One row per (env, method): means over the seeds that finished, the sample std of `after`, and the errors."""
    groups: dict[tuple[str, str], list[RunRecord]] = defaultdict(list)
    for record in records:
        groups[record.env, record.method].append(record)
    rows = []
    for (env, method), group in groups.items():
        done = [r for r in group if not r.error]
        afters = [r.after for r in done]
        sampled = [r for r in done if r.sampled_evals]
        rows.append(
            {
                "env": env,
                "method": method,
                "seeds": [r.seed for r in done],
                "before_mean": statistics.fmean(r.before for r in done) if done else None,
                "after_mean": statistics.fmean(afters) if done else None,
                "after_std": statistics.stdev(afters) if len(afters) > 1 else None,
                "after_per_seed": afters,
                # paired with the run's own warm start, so the gain is free of the warm starts' spread across seeds
                "gain_mean": statistics.fmean(r.after - r.before for r in done) if done else None,
                "gain_per_seed": [r.after - r.before for r in done],
                "sampled_before_mean": statistics.fmean(r.sampled_evals[0][1] for r in sampled) if sampled else None,
                "sampled_after_mean": statistics.fmean(r.sampled_evals[-1][1] for r in sampled) if sampled else None,
                "wall_s_mean": statistics.fmean(r.wall_s for r in done) if done else None,
                "errors": [f"seed {r.seed}: {r.error}" for r in group if r.error],
                "stopped": [
                    f"seed {r.seed} at step {r.stopped_at} (last eval: step {r.evals[-1][0]})"
                    for r in done
                    if r.stopped_at is not None
                ],
            }
        )
    return rows


def paired_differences(records: list[RunRecord], baseline: str) -> list[dict[str, Any]]:
    """Per (env, method other than `baseline`): after minus the baseline's after on the same seed, greedy and sampled,
    over the seeds where both finished. Two team arms of a seed share its warm start (and so their `before`), so for
    them this is also the difference of their gains; the single agent's warm start is another. Mean, standard error
    (sample std / sqrt n) and the 95% t interval."""
    finished = {(r.env, r.method, r.seed): r for r in records if not r.error}
    rows = []
    for env, method in dict.fromkeys((r.env, r.method) for r in records if r.method != baseline):
        pairs = [
            (finished[env, method, seed], base)
            for (e, m, seed), base in finished.items()
            if e == env and m == baseline and (env, method, seed) in finished
        ]
        row: dict[str, Any] = {"env": env, "method": method, "baseline": baseline, "seeds": [b.seed for _, b in pairs]}
        for name, value in (("greedy", lambda r: r.after), ("sampled", lambda r: r.sampled_evals[-1][1])):
            usable = [(a, b) for a, b in pairs if name == "greedy" or (a.sampled_evals and b.sampled_evals)]
            row[name] = difference_summary([value(a) - value(b) for a, b in usable])
        rows.append(row)
    return rows


def paired_cells(rows: list[dict[str, Any]]) -> list[list[str]]:
    """Header and one line per paired-difference row, as strings."""
    header = ["env", "method - baseline", "seeds", "greedy: mean (SE)", "greedy 95% interval"]
    header += ["sampled: mean (SE)", "sampled 95% interval", "greedy per seed"]
    lines = [header]
    for row in rows:
        cells = [row["env"], f"{row['method']} - {row['baseline']}", str(row["greedy"]["n"])]
        for name in ("greedy", "sampled"):
            d = row[name]
            cells += [mean_se_text(d["mean"], d["se"]), interval_text(d["ci95"])]
        cells.append(" ".join(f"{x:+.3f}" for x in row["greedy"]["per_seed"]) or "-")
        lines.append(cells)
    return lines


def table_cells(rows: list[dict[str, Any]]) -> list[list[str]]:
    """Header and one line per summary row, as strings (printed aligned, or written as Markdown)."""
    header = ["env", "method", "seeds", "held-out before -> after", "std after", "after per seed"]
    header += ["gain: mean (per seed)", "sampled before -> after", "wall s", "error", "stopped early"]
    lines = [header]
    for row in rows:
        done = row["after_mean"] is not None
        lines.append(
            [
                row["env"],
                row["method"],
                " ".join(map(str, row["seeds"])) or "-",
                f"{row['before_mean']:.3f} -> {row['after_mean']:.3f}" if done else "failed",
                f"{row['after_std']:.3f}" if row["after_std"] is not None else "-",
                " ".join(f"{a:.3f}" for a in row["after_per_seed"]) or "-",
                f"{row['gain_mean']:+.3f} ({' '.join(f'{g:+.3f}' for g in row['gain_per_seed'])})" if done else "-",
                f"{row['sampled_before_mean']:.3f} -> {row['sampled_after_mean']:.3f}"
                if row["sampled_after_mean"] is not None
                else "-",
                f"{row['wall_s_mean']:.1f}" if done else "-",
                "; ".join(row["errors"]),
                "; ".join(row["stopped"]),
            ]
        )
    return lines


def aligned(lines: list[list[str]]) -> str:
    widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)) for line in lines)


def plot_env(env: str, records: list[RunRecord], steps: int, path: Path) -> None:
    """Held-out success against step, one line per method (mean over seeds, min-max band; only the steps every seed
    reached); a method evaluated only at step 0 (no RL) is a dashed horizontal line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for method in METHODS:
        by_step: dict[int, list[float]] = defaultdict(list)
        for record in records:
            if record.env == env and record.method == method and not record.error:
                for step, success in record.evals:
                    by_step[step].append(success)
        if not by_step:
            continue
        seeds = len(by_step[0])
        label = f"{method} ({seeds} seed{'s' if seeds > 1 else ''})"
        if list(by_step) == [0]:
            ax.axhline(statistics.fmean(by_step[0]), linestyle="--", color="gray", label=label)
            continue
        # a step that some seeds did not reach (--collect of runs stopped early) would mean over fewer seeds
        points = [(step, values) for step, values in sorted(by_step.items()) if len(values) == seeds]
        x = [step for step, _ in points]
        (line,) = ax.plot(x, [statistics.fmean(v) for _, v in points], marker="o", label=label)
        if seeds > 1:
            lows, highs = [min(v) for _, v in points], [max(v) for _, v in points]
            ax.fill_between(x, lows, highs, color=line.get_color(), alpha=0.15)
    ax.set_title(f"{env}: held-out success (greedy, K=1), {steps} steps")
    ax.set_xlabel("step")
    ax.set_ylabel("success")
    ax.set_xlim(0, max(steps, 1))
    ax.set_ylim(-0.02, 1.02)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def setting_items(config: LocalTrainConfig) -> list[str]:
    """The config's keys as key=value, except those the script sets per env, seed or method."""
    skip = {*SCRIPT_KEYS, "env_options", "progress", "tensorboard", "checkpoint_every"}
    items = []
    for key, value in dataclasses.asdict(config).items():
        if key in skip:
            continue
        if isinstance(value, dict):
            items += [f"{key}.{k}={v}" for k, v in value.items() if v != "" or k != "path"]
        else:
            items.append(f"{key}={value}")
    return items


def write_markdown(path: Path, out: Path, report: dict[str, Any], lines: list[list[str]], pngs: list[Path]) -> None:
    settings = report["settings"]
    warm_starts = [
        f"{w['env']} seed {w['seed']} {w['agents']} "
        + ("reused" if w.get("reused") else f"{w['wall_s']:.1f}")
        + (f" (failed: {w['error']})" if w["error"] else "")
        for w in report["warm_starts"]
    ]
    text = [
        "# Learning: held-out success per method",
        "",
        f"Written by the learning harness (`research/harness.py`) on {report['date']} ({report['machine']}).",
        "",
        "```",
        report["command"],
        "```",
        "",
        "## Settings",
        "",
        f"- steps: {settings['steps']} per method (same step budget and seed for every method); "
        f"seeds: {' '.join(map(str, settings['seeds']))}; presets: {', '.join(settings['presets'])}",
        f"- overrides for every run: `{' '.join(settings['overrides']) or '(none)'}`",
        *[f"- {env} options: `{json.dumps(options)}`" for env, options in settings["env_options"].items()],
        *[f"- {env} training keys: `{json.dumps(keys)}`" for env, keys in ENV_KEYS.items() if env in settings["envs"]],
        f"- training keys: `{' '.join(settings['shared_keys'])}`",
        "- one warm start per (env, seed, team or single agent), saved under the output folder and loaded by every "
        "run through `model.path`: the team methods start from the same weights, and `at_grpo_per_role` starts both "
        "role models from that one model warm-started on both roles' expert moves (a plain per_role run warm-starts "
        "each role's model on its own role's moves).",
        "- held-out success: greedy, K=1, on the evaluation split, before RL (step 0) and after the last step; "
        "`sampled` is the same at the training temperature, `eval_samples` episodes per task.",
        "",
        "## Methods",
        "",
        *[f"- `{name}`: {method.description}" for name, method in METHODS.items() if name in settings["methods"]],
        "",
        "## Results",
        "",
        "Mean over seeds; std is the sample standard deviation of `after` over seeds; the gain is after minus before, "
        "per seed (each run against its own warm start: the team's or the single agent's of that seed); "
        "wall s is one run's mean wall time (evaluations included, warm start excluded; for a run reused from an "
        "earlier invocation, the time its metrics record).",
        "",
        markdown_table(lines),
        "",
        *paired_section(report["paired"]),
        f"Warm starts (wall s): {', '.join(warm_starts) or 'none here (model.path given, runs reused, or --collect)'}",
        "",
        *[f"![{png.stem}]({os.path.relpath(png, path.parent)})" for png in pngs],
        "",
        f"Per-run outputs (config.json, metrics.jsonl, learning_curve.png) and `{RESULTS_FILE}`: "
        f"`{os.path.relpath(out, path.parent)}/`.",
        "",
    ]
    path.write_text("\n".join(text))


def paired_section(rows: list[dict[str, Any]]) -> list[str]:
    """The paired-difference table's Markdown lines (none without --baseline)."""
    if not rows:
        return []
    return [
        f"### Paired differences from `{rows[0]['baseline']}`",
        "",
        "After RL, each method minus the baseline on the same seed (for two team methods the same warm start, so also "
        "the difference of the gains; the single agent has a warm start of its own); mean over seeds, its standard "
        "error (sample std / sqrt n), and the 95% interval from Student's t with n - 1 degrees of freedom.",
        "",
        markdown_table(paired_cells(rows)),
        "",
    ]


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
        for seed in plan.seeds:
            config = dataclasses.replace(configs[env], seed=seed)
            folder = out / env / f"seed{seed}"
            warm_by_agents: dict[str, WarmStart] = {}
            for method in plan.methods:
                agents = "team" if METHODS[method].team else "single"
                warm_folder = folder / f"warm_start_{agents}"
                start = str(warm_folder) if trains_warm_start(config) else config.model.path
                run_config = method_config(config, method, start, folder / method)
                if plan.collect:
                    records.append(collected_record(run_config, method))
                # the same command stopped earlier: its finished runs are kept
                elif (history := finished_history(run_config)) is not None:
                    prefixed_log(env, seed, method)(f"reusing the finished run in {run_config.output_dir}")
                    records.append(run_record(run_config, method, history, reused_wall_s(history)))
                else:
                    if agents not in warm_by_agents:
                        log = prefixed_log(env, seed, f"warm start ({agents})")
                        warm_by_agents[agents] = prepare_warm_start(config, agents, warm_folder, log)
                        if trains_warm_start(config):
                            warm_starts.append(warm_by_agents[agents])
                    records.append(run_method(run_config, method, warm_by_agents[agents], callbacks))
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


def compact_runs(
    report: dict[str, Any], configs: dict[str, LocalTrainConfig], records: list[RunRecord]
) -> list[RunCurves]:
    """The runs that evaluated, as the compact records a study keeps (`research/records.py`): their curves, with the
    command, date, machine, the env's settings and wall time; a run stopped early also names its last step."""
    runs = []
    for record in records:
        if record.error or not record.evals:
            continue
        config = configs[record.env]
        labels = {"command": report["command"], "date": report["date"], "machine": report["machine"]}
        labels |= {"keys": setting_items(config), "env_options": dict(config.env_options), "wall_s": record.wall_s}
        labels |= {"stopped_at": record.stopped_at} if record.stopped_at is not None else {}
        runs.append(
            RunCurves(record.env, record.method, record.seed, tuple(record.evals), tuple(record.sampled_evals), labels)
        )
    return runs
