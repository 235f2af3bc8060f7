"""What a code design's warm starts play like before RL: each seed's step-0 held-out readings, their mean and SE.

Reads each run's step-0 evaluation row from `RUNS/code/seedS/ARM/metrics.jsonl` and writes, per reading, the per-seed
values, mean, standard error and 95% t interval (`verl_mas.stats.difference_summary`): greedy and sampled success, the
share of sampled episodes whose first program solves the task, what the second turn adds (sampled success minus that
share), and the tester's first-turn shares (catch, credited, replies with a case the correct program fails).

    python -m research.code_tester.before_rl --runs runs/code_nm --seeds 20 21 22 \\
        --out research/code_tester/data/before_rl.json

With `--admit-cost C` it writes nothing and prints the seeds whose warm start leaves the room a design set before its
runs: the second turn costs at least C of sampled success (what it adds is -C or less), read before any RL.

    python -m research.code_tester.before_rl --runs runs/code_room_screen --seeds 30 --admit-cost 0.10
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from verl_mas.stats import difference_summary

ARM = "at_grpo_catch_share"
SAMPLED = "eval_sampled/"
READINGS = {
    "greedy success": lambda row: row["eval/success"],
    "sampled success": lambda row: row[SAMPLED + "success"],
    "sampled first program solves": lambda row: row[SAMPLED + "coder/turn0/team_reward"],
    "sampled second turn adds": lambda row: row[SAMPLED + "success"] - row[SAMPLED + "coder/turn0/team_reward"],
    "tester first turn catch share": lambda row: row[SAMPLED + "tester/turn0/catch_share"],
    "tester first turn credited share": lambda row: row[SAMPLED + "tester/turn0/credited_share"],
    "tester first turn replies with a failing case": lambda row: row[SAMPLED + "tester/turn0/wrong_case_share"],
}
REQUIRED = (
    "eval/success",
    *(SAMPLED + key for key in ("success", "coder/turn0/team_reward")),
    *(SAMPLED + f"tester/turn0/{share}" for share in ("catch_share", "credited_share", "wrong_case_share")),
)


def step0_row(runs: Path, seed: int, arm: str) -> dict:
    path = runs / "code" / f"seed{seed}" / arm / "metrics.jsonl"
    if not path.is_file():
        raise SystemExit(f"{path}: no metrics file (seed {seed}, arm {arm})")
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        try:
            row = json.loads(line)
        except ValueError as error:
            raise SystemExit(f"{path}, line {number}: not a JSON row ({error})") from None
        if row.get("step") == 0 and SAMPLED + "success" in row:
            missing = [key for key in REQUIRED if key not in row]
            if missing:
                raise SystemExit(f"{path}: the step-0 evaluation row lacks {', '.join(missing)}")
            return row
    raise SystemExit(f"{path}: no step-0 evaluation row")


def before_rl(runs: Path, seeds: Sequence[int], arm: str) -> dict:
    rows = [step0_row(runs, seed, arm) for seed in seeds]
    return {name: difference_summary([read(row) for row in rows]) for name, read in READINGS.items()}


def admitted(runs: Path, seeds: Sequence[int], arm: str, cost: float) -> list[int]:
    """The seeds whose second turn costs at least `cost` of sampled success before RL."""
    adds = READINGS["sampled second turn adds"]
    return [seed for seed in seeds if adds(step0_row(runs, seed, arm)) <= -cost]


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m research.code_tester.before_rl",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--runs", type=Path, required=True)
    parser.add_argument("--seeds", type=int, nargs="+", required=True)
    parser.add_argument("--arm", default=ARM)
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--out", type=Path, help="write the readings here as JSON")
    target.add_argument("--admit-cost", type=float, help="print the seeds whose second turn costs at least this")
    args = parser.parse_args(argv)
    if args.admit_cost is not None:
        if not 0.0 <= args.admit_cost <= 1.0:
            parser.error(f"--admit-cost must be in [0, 1], got {args.admit_cost}")
        print(" ".join(map(str, admitted(args.runs, args.seeds, args.arm, args.admit_cost))))
        return
    if len(args.seeds) < 2:
        parser.error("--seeds needs at least 2 seeds for a standard error")
    table = before_rl(args.runs, args.seeds, args.arm)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    record = {
        "command": " ".join(["python", "-m", "research.code_tester.before_rl", *(argv or sys.argv[1:])]),
        "readings": table,
    }
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    for name, entry in table.items():
        print(f"{name}: {entry['mean']:.3f} (SE {entry['se']:.3f})")


if __name__ == "__main__":
    main()
