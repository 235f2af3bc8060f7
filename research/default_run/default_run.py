"""The tiny default run (`verl-mas train` with no overrides; `make run` until 2026-12-08): `record` runs and times it
into research/default_run/data/default_run.json; `check` compares a run.

    python -m research.default_run record            # about 11 minutes
    python -m research.default_run check runs/default [--log train.log]
    python -m research.default_run show              # the figures as the docs quote them

`record` runs `.venv/bin/verl-mas train` with no overrides from a fresh temporary folder
(so its outputs land in that folder's runs/default/ and a user's own runs/default/ is left alone), and writes the
figures the README and the study's page quote: date, command, machine (cores, torch and its threads, the load on the
machine before, during and after), wall time, held-out success before and after RL with counts and standard errors,
the evaluation curve, the training rollouts' first and last 50 steps, and the median step's time split. It copies the
run's learning curve to research/default_run/data/default_learning_curve.png.

`check RUN_DIR` recomputes the same figures from a run's config.json and metrics.jsonl (and, with --log, finds the
summary lines `verl-mas train` printed) and compares them with the JSON: the run is bit-reproducible for the same seed,
thread count and CPU (torch's kernels round differently on other SIMD extensions, so another CPU model may read other
figures), so every success figure must match exactly; times are shown side by side, not compared. A setting added
since the record, at its default in the run, is named but is no difference in the config.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from verl_mas.local.reporting import read_metrics  # light: `show` imports no torch

REPO = Path(__file__).resolve().parents[2]
RESULTS = Path(__file__).resolve().parent / "data" / "default_run.json"
CURVE = RESULTS.parent / "default_learning_curve.png"
COMMAND = [".venv/bin/verl-mas", "train"]
RUN_DIR = Path("runs/default")  # the default output_dir, relative to where the command runs
# The step's parts as metrics.jsonl names them (time/<part>_s), in the order they happen.
STEP_PARTS = ("rollout", "generation", "generator_overhead", "advantage", "tensors", "update", "step")
# Training-rollout figures averaged over the first and the last WINDOW steps.
WINDOW = 50
ROLLOUT_KEYS = ("success", "reward", "invalid_move_share", "zero_variance_share")


def read_run(run_dir: Path) -> tuple[dict, list[dict]]:
    """A run's config.json and its metrics.jsonl rows."""
    return json.loads((run_dir / "config.json").read_text()), read_metrics(run_dir)


def reading(success: float, n: int) -> dict:
    """One held-out reading: its share, the count it is, and the binomial standard error."""
    solved = round(success * n)
    return {"success": success, "solved": solved, "of": n, "se": math.sqrt(success * (1 - success) / n)}


def run_figures(config: dict, rows: list[dict]) -> dict:
    """Everything the JSON records that the run's own files determine (all of it reproducible but the times)."""
    boards, sampled_n = config["eval_tasks"], config["eval_tasks"] * config["eval_samples"]
    evals = [row for row in rows if "eval/success" in row]
    curve = [
        {"step": row["step"], "greedy": reading(row["eval/success"], boards)}
        | ({"sampled": reading(row["eval_sampled/success"], sampled_n)} if "eval_sampled/success" in row else {})
        for row in evals
    ]
    steps = [row for row in rows if row["step"] > 0]
    windows = {"first": steps[:WINDOW], "last": steps[-WINDOW:]}
    return {
        "settings": {
            "steps": config["steps"],
            "eval_boards": boards,
            "eval_sampled_episodes": sampled_n,
            "eval_every": config["eval_every"],
        },
        "greedy": {"before": curve[0]["greedy"], "after": curve[-1]["greedy"]},
        "sampled": {"before": curve[0]["sampled"], "after": curve[-1]["sampled"]} if "sampled" in curve[0] else None,
        "curve": curve,
        "train_rollouts": {
            name: {
                "steps": [window[0]["step"], window[-1]["step"]],
                **{key: statistics.fmean(row[f"rollout/{key}"] for row in window) for key in ROLLOUT_KEYS},
            }
            for name, window in windows.items()
        },
    }


def step_times(rows: list[dict]) -> dict:
    """The median step's parts and the evaluations' times, in seconds."""
    steps = [row for row in rows if row["step"] > 0]
    medians = {part: statistics.median(row.get(f"time/{part}_s", 0.0) for row in steps) for part in STEP_PARTS}
    evals = [row["time/eval_s"] for row in steps if "time/eval_s" in row]
    return {
        "median_step_s": medians,
        "steps_total_s": sum(row["time/step_s"] for row in steps),
        "eval_s": evals,
    }


def summary_lines(figures: dict) -> list[str]:
    """The success part of what `verl-mas train` prints at the end (cli.py), from the JSON's figures."""
    greedy, sampled, steps = figures["greedy"], figures["sampled"], figures["settings"]["steps"]
    lines = [
        f"held-out success (greedy): {greedy['before']['success']:.3f} before RL -> "
        f"{greedy['after']['success']:.3f} after {steps} steps"
    ]
    if sampled is not None:
        lines.append(
            f"held-out success (sampled): {sampled['before']['success']:.3f} before RL -> "
            f"{sampled['after']['success']:.3f}"
        )
    return lines


def minutes(seconds: float) -> str:
    """A duration as the docs write it: `4 min 54 s`."""
    whole = round(seconds)
    return f"{whole // 60} min {whole % 60} s"


def headline(record: dict) -> str:
    """The before -> after figures as the README and the results index quote them."""
    greedy, sampled = record["greedy"], record["sampled"]
    return (
        f"greedy {greedy['before']['success']:.3f} -> {greedy['after']['success']:.3f}, "
        f"sampled {sampled['before']['success']:.3f} -> {sampled['after']['success']:.3f}"
    )


def machine_line(record: dict) -> str:
    """Where and when, as the docs say it: date, cores, torch, threads, and the load."""
    machine = record["machine"]
    return (
        f"{record['date']}, {machine.get('cpu', 'CPU model not recorded')}, {machine['cpus']} cores, "
        f"torch {machine['torch']} ({machine['torch_threads']} threads), "
        f"{'idle' if machine['idle'] else 'not idle'}: other processes used {machine['others_cpu_share']:.0%} "
        f"of the cores during the run"
    )


def curve_table(record: dict) -> str:
    """The evaluation curve as a Markdown table (default_run.md quotes it)."""
    curve = record["curve"]
    last = curve[-1]["step"]
    head = ["held-out success", *("before RL" if p["step"] == 0 else str(p["step"]) for p in curve)]
    head[-1] = f"{last} (after)"
    settings = record["settings"]
    rows = [
        [f"greedy ({settings['eval_boards']} boards)", *(f"{p['greedy']['success']:.3f}" for p in curve)],
        [
            f"sampled, T = 1.0 ({settings['eval_sampled_episodes']} episodes)",
            *(f"{p['sampled']['success']:.3f}" for p in curve),
        ],
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def time_table(record: dict) -> str:
    """The median step's parts and the wall time's split as a Markdown table (default_run.md quotes it)."""
    times = record["times"]
    median = times["median_step_s"]
    rows = [
        ("wall time of the command", f"{record['wall_s']:.1f} s ({minutes(record['wall_s'])})"),
        ("before the first step (tokenizer, expert data, warm start, first evaluation)", f"{times['setup_s']:.1f} s"),
        (f"{record['settings']['steps']} steps (sum)", f"{times['steps_total_s']:.1f} s"),
        (f"{len(times['eval_s'])} evaluations (sum)", f"{sum(times['eval_s']):.1f} s"),
        ("median step", f"{median['step']:.3f} s"),
        ("median step: rollout", f"{median['rollout']:.3f} s"),
        ("median step: rollout: generation", f"{median['generation']:.3f} s"),
        ("median step: rollout: generator bookkeeping", f"{median['generator_overhead']:.3f} s"),
        ("median step: advantage", f"{median['advantage']:.4f} s"),
        ("median step: batch tensors", f"{median['tensors']:.4f} s"),
        ("median step: update", f"{median['update']:.3f} s"),
    ]
    return "\n".join(["| part | time |", "|---|---|", *(f"| {name} | {value} |" for name, value in rows)])


def cpu_busy_s() -> float:
    """CPU-seconds the whole machine has spent busy since boot (all cores, /proc/stat)."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    ticks = [int(v) for v in fields]
    idle = ticks[3] + ticks[4]  # idle, iowait
    return (sum(ticks[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def cpu_model() -> str:
    """The CPU's model name and its SIMD extensions (torch's kernels, and so the run's rounding, depend on both)."""
    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    fields = dict(line.split(":", 1) for line in info.splitlines() if ":" in line)
    fields = {key.strip(): value.strip() for key, value in fields.items()}
    simd = sorted(flag for flag in fields.get("flags", "").split() if flag.startswith(("avx", "fma", "amx")))
    return f"{fields.get('model name', platform.processor() or 'unknown')} ({' '.join(simd) or 'no AVX'})"


def machine_facts() -> dict:
    import torch

    return {
        "cpu": cpu_model(),
        "cpus": os.cpu_count(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def record(args: argparse.Namespace) -> None:
    """Run the default, time it, write the JSON and copy the curve."""
    verl_mas = REPO / COMMAND[0]
    if not verl_mas.exists():
        sys.exit(f"{verl_mas} is missing: run `make run` (or `make test`) once to create the venv")
    work = Path(tempfile.mkdtemp(prefix="default_run_"))
    machine = machine_facts()
    load_before = os.getloadavg()
    busy_before, ours_before = cpu_busy_s(), children_cpu_s()
    started_at = datetime.now(timezone.utc)
    started = time.perf_counter()
    with (work / "train.log").open("w") as log:
        done = subprocess.run([str(verl_mas), *COMMAND[1:]], cwd=work, stdout=log, stderr=subprocess.STDOUT)
    wall = time.perf_counter() - started
    busy, ours = cpu_busy_s() - busy_before, children_cpu_s() - ours_before
    load_after = os.getloadavg()
    output = (work / "train.log").read_text()
    if done.returncode:
        sys.exit(f"{' '.join(COMMAND)} failed ({done.returncode}); its output is in {work / 'train.log'}")
    config, rows = read_run(work / RUN_DIR)
    figures = run_figures(config, rows)
    missing = [line for line in summary_lines(figures) if line not in output]
    if missing:
        sys.exit(f"the printed summary does not match metrics.jsonl: {missing} not in {work / 'train.log'}")
    others = max(busy - ours, 0.0) / (wall * machine["cpus"])
    times = step_times(rows)
    times["setup_s"] = wall - times["steps_total_s"] - sum(times["eval_s"])
    result = {
        "date": started_at.date().isoformat(),
        "started_utc": started_at.isoformat(timespec="seconds"),
        "command": " ".join(COMMAND) + ", no overrides (run by python -m research.default_run record)",
        "machine": machine
        | {
            "load_average_before": list(load_before),
            "load_average_after": list(load_after),
            "run_cpu_s": ours,
            "others_cpu_share": others,
            "idle": others < args.idle_share,
            "idle_rule": f"other processes used under {args.idle_share:.0%} of all cores' time during the run",
        },
        "wall_s": wall,
        **figures,
        "times": times,
        "summary_printed": [line for line in output.splitlines() if line.startswith("held-out success")],
        "warm_start_printed": [line for line in output.splitlines() if line.startswith("warm start")],
        "config": config,
        "notes": (
            "Standard errors are binomial, sqrt(p(1-p)/n); the sampled ones treat the 2 episodes per board as "
            "independent, so they understate the error somewhat. The evaluations use the same boards and, for the "
            "sampled ones, the same random numbers every time. setup_s is the wall time outside the steps and "
            "their evaluations: process start, tokenizer, expert data, warm start, first evaluation, final plot."
        ),
    }
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    shutil.copyfile(work / RUN_DIR / "learning_curve.png", CURVE)
    print(report(result))
    print(f"wrote {RESULTS.relative_to(REPO)} and {CURVE.relative_to(REPO)}; the run's files are in {work}")


def check(args: argparse.Namespace) -> None:
    """Compare a run's files (and printed summary) with the JSON; exit 1 on any difference in the figures."""
    recorded = json.loads(RESULTS.read_text())
    config, rows = read_run(args.run_dir)
    figures = run_figures(config, rows)
    problems = []
    changed, predated = config_changes(recorded["config"], config, default_config())
    if changed:
        problems.append(f"config.json differs from the recorded default in {', '.join(changed)}")
    if predated:
        print(f"settings newer than the record, at their defaults in this run: {', '.join(predated)}")
    for key, value in figures.items():
        if value != recorded[key]:
            problems.append(f"{key}: recorded {json.dumps(recorded[key])}\n  this run {json.dumps(value)}")
    if args.log is not None:
        output = args.log.read_text()
        problems += [f"not printed: {line!r}" for line in summary_lines(recorded) if line not in output]
    print(report(recorded | figures | {"times": step_times(rows)}, recorded))
    if problems:
        here, there = cpu_model(), recorded["machine"].get("cpu")
        if here != there:
            problems.append(f"the record was made on {there or 'a CPU it did not name'}, this machine is {here}")
        print(f"DIFFERS from {os.path.relpath(RESULTS, REPO)}:\n- " + "\n- ".join(problems))
        sys.exit(1)
    print(f"matches {os.path.relpath(RESULTS, REPO)} (recorded {recorded['date']}): every success figure is identical")


def default_config() -> dict:
    """The config `verl-mas train` runs with today (the embedded default), as a run's config.json holds it."""
    from verl_mas.local.config import LocalTrainConfig, config_json  # imports torch: `show` does without it

    return json.loads(config_json(LocalTrainConfig()))


def config_changes(recorded: dict, config: dict, defaults: dict) -> tuple[list[str], list[str]]:
    """The settings (dotted keys, output_dir aside) on which a run's config differs from the record's, and those the
    record predates: absent from it, and at their default in the run.

    A setting added since the record, left at its default, is no difference: the record ran without it. Were its
    default to behave otherwise than the record's run did, the success figures, compared exactly, would show it."""
    from verl_mas.local.arms import flat_keys

    saved, current, default = flat_keys(recorded), flat_keys(config), flat_keys(defaults)
    absent = object()
    changed, predated = [], []
    for key in sorted(saved.keys() | current.keys()):
        if key == "output_dir" or saved.get(key, absent) == current.get(key, absent):
            continue
        at_default = key in default and current.get(key, absent) == default[key]
        (predated if key not in saved and at_default else changed).append(key)
    return changed, predated


def show(args: argparse.Namespace) -> None:
    """Print the JSON's figures as the docs quote them (tests/docs/test_figures.py checks the docs hold these)."""
    recorded = json.loads(RESULTS.read_text())
    counts = [
        f"{kind} {when} RL: {recorded[kind][when]['solved']} of {recorded[kind][when]['of']}"
        for kind in ("greedy", "sampled")
        for when in ("before", "after")
    ]
    print(
        "\n".join(
            [
                f"headline: {headline(recorded)}",
                f"wall time: {minutes(recorded['wall_s'])} (README: about {round(recorded['wall_s'] / 60)} minutes)",
                f"machine: {machine_line(recorded)}",
                *counts,
                "",
                curve_table(recorded),
                "",
                time_table(recorded),
            ]
        )
    )


def report(record: dict, recorded: dict | None = None) -> str:
    """The figures as text: curve, before -> after with counts and errors, and the median step (vs the record)."""
    lines = [curve_table(record), ""]
    for kind in ("greedy", "sampled"):
        before, after = record[kind]["before"], record[kind]["after"]
        lines.append(
            f"{kind}: {before['success']:.3f} ({before['solved']}/{before['of']}, se {before['se']:.3f}) -> "
            f"{after['success']:.3f} ({after['solved']}/{after['of']}, se {after['se']:.3f})"
        )
    median = record["times"]["median_step_s"]
    line = f"median step {median['step']:.3f} s (rollout {median['rollout']:.3f} s, update {median['update']:.3f} s)"
    if recorded is not None:
        line += f"; recorded {recorded['times']['median_step_s']['step']:.3f} s, wall {minutes(recorded['wall_s'])}"
    else:
        line += f"; wall {minutes(record['wall_s'])}; {machine_line(record)}"
    return "\n".join([*lines, line])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m research.default_run", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record", help="run `verl-mas train` with no overrides and write " + str(RESULTS.name))
    rec.add_argument(
        "--idle-share", type=float, default=0.1, help="call the machine idle below this share of others' CPU use"
    )
    chk = sub.add_parser("check", help="compare a run folder (and its printed output) with " + str(RESULTS.name))
    chk.add_argument("run_dir", type=Path)
    chk.add_argument("--log", type=Path, help="the output `verl-mas train` printed, to find its summary lines in")
    sub.add_parser("show", help="print the figures of " + str(RESULTS.name) + " as the docs quote them")
    args = parser.parse_args(argv)
    {"record": record, "check": check, "show": show}[args.command](args)


if __name__ == "__main__":
    main()
