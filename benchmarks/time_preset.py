"""Benchmark: a real-model preset end to end, as a user runs it on a fresh machine: `verl-mas model` into an empty
cache (the conversion), then `verl-mas train preset=NAME`, each timed by wall clock; the run's own metrics split
the training command into its evaluations, its RL steps and the rest (loading and any format tune).

Run: python benchmarks/time_preset.py [--preset NAME] [--out FILE] [key=value ...]
Prints the parts and writes FILE (default benchmarks/results/preset_NAME.json; the recorded runs are
research/smollm2_speed/data/preset_smollm2.json and preset_smollm2_math.json). Times are one run's: run it on an
otherwise idle machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from verl_mas.local.reporting import read_metrics
from verl_mas.pretrained import CACHE_ENV

REPO = Path(__file__).resolve().parents[1]
MODEL = "smollm2-135m-instruct"
VERL_MAS = str(Path(sys.executable).parent / "verl-mas")


def timed(command: list[str], env: dict[str, str], log: Path) -> float:
    """Wall seconds of `command`, its output appended to `log`; a failure stops the benchmark with the output's end."""
    started = time.perf_counter()
    with log.open("a") as handle:
        done = subprocess.run(command, env=env, stdout=handle, stderr=subprocess.STDOUT, check=False)
    if done.returncode != 0:
        tail = "\n".join(log.read_text().splitlines()[-30:])
        raise SystemExit(f"{' '.join(command)} failed ({done.returncode}); the end of its output:\n{tail}")
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="smollm2", choices=["smollm2", "smollm2_math"])
    parser.add_argument("--out", type=Path, help="default: benchmarks/results/preset_NAME.json")
    parser.add_argument("overrides", nargs="*", help="key=value overrides after preset=NAME (none for the record)")
    args = parser.parse_args()
    out = args.out or REPO / "benchmarks" / "results" / f"preset_{args.preset}.json"
    with tempfile.TemporaryDirectory(prefix="time_preset.") as scratch:
        env = os.environ | {CACHE_ENV: str(Path(scratch) / "cache")}
        log, run = Path(scratch) / "output.log", Path(scratch) / "run"
        train = [VERL_MAS, "train", f"preset={args.preset}", *args.overrides, f"output_dir={run}"]
        load_before = os.getloadavg()
        conversion_s = timed([VERL_MAS, "model", MODEL], env, log)
        train_s = timed(train, env, log)
        load_after = os.getloadavg()
        rows = read_metrics(run)
        config = json.loads((run / "config.json").read_text())
    steps = [row["time/step_s"] for row in rows if "time/step_s" in row]
    evals = [row["time/eval_s"] for row in rows if "time/eval_s" in row]
    readings = [row for row in rows if "eval/success" in row]
    overrides = "".join(f" {override}" for override in args.overrides)
    found = {
        "date": time.strftime("%Y-%m-%d"),
        "command": f"python benchmarks/time_preset.py --preset {args.preset}{overrides}",
        "train_command": f"verl-mas train preset={args.preset}{overrides}",
        "cpus": os.cpu_count(),
        # 1, 5 and 15-minute load averages: before says whether the machine was idle; after, with the run's own 2
        # cores busy, a 1-minute figure well above 2 means another process shared them
        "load_average_before": [round(load, 2) for load in load_before],
        "load_average_after": [round(load, 2) for load in load_after],
        "conversion_s": round(conversion_s, 1),
        "train_s": round(train_s, 1),
        "rl_steps": len(steps),
        "rl_s": round(sum(steps), 1),
        "step_s_median": round(statistics.median(steps), 1) if steps else None,
        "evaluations": len(evals),
        "evaluation_s": round(sum(evals), 1),
        "greedy": [readings[0]["eval/success"], readings[-1]["eval/success"]],
        "sampled": [readings[0].get("eval_sampled/success"), readings[-1].get("eval_sampled/success")],
    }
    found["load_and_tune_s"] = round(train_s - found["rl_s"] - found["evaluation_s"], 1)
    found["config"] = config  # the run's config.json: a test holds a record to the preset as it is today
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(found, indent=2) + "\n")
    print(json.dumps(found, indent=2))


if __name__ == "__main__":
    main()
