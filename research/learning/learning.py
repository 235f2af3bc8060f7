"""The project's small version of the paper's table: held-out success of the training methods per env and seed.

For each env and seed it warm-starts a tiny model on the expert's moves once for the team and once for the single
agent (`research/harness.py`), trains each method from that warm start with the same step budget, and reports
held-out success (greedy, and sampled at the training temperature) before RL and after the last step. Methods:
`mas_no_rl` (the warm start, no RL), `single_grpo` (one agent, K independent episodes, groups per task),
`at_grpo_shared` (tree, groups per (task, role, turn), one model), `at_grpo_per_role` (the same, one model per role,
both from the team's warm start), `mas_grpo_task` (tree, one group per task); on request
`at_grpo_task_role`, `mas_no_tree`, `at_grpo_shared_kl` (update.kl_coef from the command) and the code tester's
rule arms (`research.code_tester`).

    python -m research.learning --envs plan_path --seeds 0 1 2 --steps 150 progress=false
    python -m research.learning --envs plan_path --preset code_tool --seeds 1 --steps 40 \\
        --methods mas_no_rl single_grpo at_grpo_shared \\
        env_options.size=6 warm_start.env_options.size=5 update.lr=1e-4 eval_tasks=128 eval_every=20 progress=false

key=value items are overrides as for `verl-mas train` (env, seed, steps, output_dir, router, grouping, rollout_mode,
resume, preset and env_options.single_agent come from the flags and the method). It writes OUT.md (the table, the
command, every setting), OUT/learning.json (the same as data), OUT/runs.jsonl (one compact record a run: what a
study's data/ keep, `research/records.py`), OUT/<env>_learning.png (held-out success per step,
mean over seeds with a min-max band), each run's folder OUT/<env>/seed<S>/<method>/ and the warm starts
OUT/<env>/seed<S>/warm_start_team/ and warm_start_single/ (with a key file).

Running the same command again reuses every run that finished with exactly the same config and every saved warm
start with the same key; the report is rewritten after each run, so a stopped command keeps what it finished. To use
both cores, start one process per seed with the same --out and OMP_NUM_THREADS=1, then run the whole command once
more: it trains nothing new and writes the combined table. --collect trains nothing: it reports the runs saved under
OUT, a run stopped early with its last evaluation as `after`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from research.harness import DEFAULT_OUT, Plan, parse_with_overrides, run_plan
from research.methods import DEFAULT_METHODS, ENV_OPTIONS, METHODS


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m research.learning", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--envs", nargs="+", default=list(ENV_OPTIONS), help="environments (default: %(default)s)")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0], help="seeds (default: 0)")
    parser.add_argument("--steps", type=int, help="RL steps of every method (default: the config's steps)")
    parser.add_argument(
        "--methods", nargs="+", choices=list(METHODS), default=list(DEFAULT_METHODS), help="default: %(default)s"
    )
    parser.add_argument(
        "--baseline",
        choices=list(METHODS),
        help="also report every other method's paired difference from this one (same seed), with 95%% intervals",
    )
    parser.add_argument("--preset", nargs="+", default=["default"], help="training presets, applied in order")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output folder; the report goes to OUT.md")
    parser.add_argument(
        "--collect",
        action="store_true",
        help="train nothing: report the runs this command saved under OUT, those stopped early with their last eval",
    )
    parser.add_argument("overrides", nargs="*", help="key=value training-config overrides (as for verl-mas train)")
    return parse_with_overrides(parser, argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    plan = Plan(
        envs=args.envs,
        seeds=args.seeds,
        methods=args.methods,
        out=args.out,
        command=["python", "-m", "research.learning", *args.argv],
        steps=args.steps,
        presets=args.preset,
        overrides=args.overrides,
        baseline=args.baseline,
        collect=args.collect,
    )
    run_plan(plan)


if __name__ == "__main__":
    main()
