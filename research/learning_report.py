"""The learning harness's records and report: each warm start and run, the table of held-out success per method
with paired differences from a baseline, the plots, OUT.md, and the compact records a study keeps."""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from research.methods import ENV_KEYS, METHODS, SCRIPT_KEYS
from research.records import RunCurves
from verl_mas.local.config import LocalTrainConfig
from verl_mas.stats import interval_text, markdown_table, mean_se_text, paired_by_seed

RESULTS_FILE = "learning.json"


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


def inside(out: Path, path: str) -> str:
    """`path` relative to the output folder when it lies in it, so that the JSON does not name this machine's paths."""
    return os.path.relpath(path, out) if path and Path(path).is_relative_to(out) else path


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
        base = {seed: r for (e, m, seed), r in finished.items() if (e, m) == (env, baseline)}
        runs = {seed: finished[env, method, seed] for seed in base if (env, method, seed) in finished}
        row: dict[str, Any] = {"env": env, "method": method, "baseline": baseline, "seeds": list(runs)}
        for name, value in (("greedy", after), ("sampled", sampled_after)):
            summary = paired_by_seed({s: value(r) for s, r in runs.items()}, {s: value(r) for s, r in base.items()})
            row[name] = summary.as_dict()
        rows.append(row)
    return rows


def after(record: RunRecord) -> float:
    return record.after


def sampled_after(record: RunRecord) -> float | None:
    return record.sampled_evals[-1][1] if record.sampled_evals else None


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
