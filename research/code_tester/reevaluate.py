"""A check for regression to the mean: each run's warm start evaluated again with other draws, and the gain from it.

A design that admits a seed on a reading before RL (`before_rl.py --admit-cost`) picks warm starts whose reading came
out low, partly by chance, and a later reading of the same model would then rise with no learning. For each run folder
given (a local-engine run whose `config.json` loads its warm start through `model.path`), this evaluates the warm start
again on the same held-out tasks with `--samples` sampled episodes a task, drawn with other random numbers than the
run's own evaluations (`verl-mas eval`'s stream), and reads the run's last sampled evaluation from its `metrics.jsonl`.
It writes, per seed and as mean (SE) [95% t interval], the run's step-0 reading, the re-evaluation, the last reading,
the gain measured from each, and the first program's share and the second turn's cost in both readings of the warm
start. Trains nothing. With `--combine` it evaluates nothing and joins the runs of files this script wrote (runs
re-evaluated one by one, as each finished) into one record with the summary over all of them.

    OMP_NUM_THREADS=1 python -m research.code_tester.reevaluate runs/code_room/code/seed{30,31}/at_grpo_catch_share \\
        --samples 8 --out research/code_tester/data/reevaluated.json
    python -m research.code_tester.reevaluate --combine runs/code_room/reeval_seed*.json --out reevaluated.json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from verl_mas.local.config import CONFIG_FILE, read_config
from verl_mas.local.evaluate import EvalConfig, evaluate
from verl_mas.local.reporting import METRICS_FILE, read_metrics
from verl_mas.stats import difference_summary

SUCCESS = "eval_sampled/success"
FIRST_PROGRAM = "eval_sampled/coder/turn0/team_reward"


def evaluation_rows(run: Path) -> tuple[dict, dict]:
    """The run's step-0 and last sampled evaluation rows."""
    path = run / METRICS_FILE
    if not path.is_file():
        raise SystemExit(f"{path}: no metrics file")
    rows = [row for row in read_metrics(run) if SUCCESS in row and FIRST_PROGRAM in row]
    if not rows or rows[0].get("step") != 0:
        raise SystemExit(f"{path}: no step-0 sampled evaluation")
    if len(rows) < 2:
        raise SystemExit(f"{path}: no sampled evaluation after step 0")
    return rows[0], rows[-1]


def reevaluate(run: Path, samples: int) -> dict[str, float]:
    """The warm start of `run`, evaluated again with `samples` sampled episodes a task: success and first program."""
    config = read_config(run / CONFIG_FILE)
    if not config.model.path:
        raise SystemExit(f"{run}: its config has no model.path, so its warm start is not a saved model")
    with tempfile.TemporaryDirectory() as scratch:
        eval_config = EvalConfig(samples=samples, temperature=config.sampling.temperature, json=f"{scratch}/eval.json")
        report = evaluate(config, eval_config, None, log=lambda _: None)
    (first,) = [row for row in report.role_turns if row["role"] == "coder" and row["turn"] == 0]
    return {"success": report.success[config.env], "first program": first["team_reward"]}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m research.code_tester.reevaluate",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("runs", nargs="+", type=Path, help="run folders (each with config.json and metrics.jsonl)")
    parser.add_argument("--samples", type=int, default=8, help="sampled episodes a task (default: %(default)s)")
    parser.add_argument("--combine", action="store_true", help="the arguments are files this script wrote: join them")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.samples < 1:
        parser.error(f"--samples must be >= 1, got {args.samples}")
    command = " ".join(
        ["python", "-m", "research.code_tester.reevaluate", *(argv if argv is not None else sys.argv[1:])]
    )
    if args.combine:
        records = [json.loads(path.read_text()) for path in args.runs]
        samples = {record["samples"] for record in records}
        if len(samples) != 1:
            raise SystemExit(f"--combine: the files re-evaluated with different --samples: {sorted(samples)}")
        write_record(args.out, command, samples.pop(), [run for record in records for run in record["runs"]])
        return
    per_run = []
    for run in args.runs:
        step0, last = evaluation_rows(run)  # read first: a run without its readings fails before any evaluation
        again = reevaluate(run, args.samples)
        per_run.append(
            {
                "run": str(run),
                "last step": last["step"],
                "step 0 success": step0[SUCCESS],
                "re-evaluated success": again["success"],
                "last success": last[SUCCESS],
                "step 0 second turn adds": step0[SUCCESS] - step0[FIRST_PROGRAM],
                "re-evaluated second turn adds": again["success"] - again["first program"],
                "gain from step 0": last[SUCCESS] - step0[SUCCESS],
                "gain from the re-evaluation": last[SUCCESS] - again["success"],
            }
        )
        print(
            ", ".join(
                f"{key}: {value:.3f}" if isinstance(value, float) else str(value) for key, value in per_run[-1].items()
            )
        )
    write_record(args.out, command, args.samples, per_run)


def write_record(out: Path, command: str, samples: int, per_run: list[dict]) -> None:
    """The runs' readings and, for each, its summary over the runs."""
    runs = [run["run"] for run in per_run]
    if len(set(runs)) != len(runs):
        raise SystemExit(f"a run is listed twice: {sorted(r for r in runs if runs.count(r) > 1)}")
    readings = [key for key in per_run[0] if key not in ("run", "last step")]
    record = {
        "command": command,
        "samples": samples,
        "runs": per_run,
        "summary": {key: difference_summary([run[key] for run in per_run]) for key in readings},
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()
