"""The `verl-mas` command: demo, train, data, envs."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from verl_mas.overrides import apply_overrides, parse_overrides

USAGE = """\
verl-mas: multi-agent AT-GRPO for verl

  verl-mas demo [key=value ...]   one AT-GRPO batch on a scripted policy: prints the tree and advantages
                                  keys: env, env_options.<name>, tasks, k, alpha, skill, seed, router
                                  e.g.  verl-mas demo env=sudoku env_options='{size: 4, tool_mode: compact}'
  verl-mas train [key=value ...]  local AT-GRPO training (tiny model on CPU by default): warm start,
                                  evaluation before and after, metrics.jsonl and learning_curve.png
                                  keys: env, env_options.<name>, router, k, alpha, grouping, steps,
                                  tasks_per_step, eval_tasks, eval_every, seed, output_dir,
                                  model.<path|hidden|layers|heads|vocab_size>, warm_start.<...>,
                                  sampling.<temperature|top_p|top_k|max_new_tokens>, update.<lr|clip_ratio|...>
  verl-mas data --env NAME --out DIR [--train N] [--eval N] [--seed S] [key=value ...]
                                  write train.parquet / eval.parquet in verl's row format
                                  (key=value pairs are environment options, e.g. size=6)
  verl-mas envs                   list the registered environments and their roles
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="verl-mas", description=USAGE, formatter_class=argparse.RawTextHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="one AT-GRPO batch on a scripted policy")
    demo.add_argument("overrides", nargs="*", help="key=value overrides of the demo config")
    train = sub.add_parser("train", help="local AT-GRPO training")
    train.add_argument("overrides", nargs="*", help="key=value overrides of the training config")
    data = sub.add_parser("data", help="write train/eval parquet files for an environment")
    data.add_argument("--env", required=True)
    data.add_argument("--out", required=True, type=Path)
    data.add_argument("--train", type=int, default=1024)
    data.add_argument("--eval", type=int, default=100)
    data.add_argument("--seed", type=int, default=0)
    data.add_argument("options", nargs="*", help="environment options as key=value")
    sub.add_parser("envs", help="list registered environments")
    args = parser.parse_args(argv)
    try:
        return _dispatch(args)
    except (ValueError, KeyError) as exc:
        print(f"verl-mas {args.command}: error: {exc.args[0] if exc.args else exc}", file=sys.stderr)
        return 2


def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "demo":
        from verl_mas.demo import DemoConfig, format_demo, run_demo

        config = apply_overrides(DemoConfig(), parse_overrides(args.overrides))
        results, metrics = run_demo(config)
        print(format_demo(results, metrics))
    elif args.command == "train":
        from verl_mas.local.train import LocalTrainConfig, train

        overrides = parse_overrides(args.overrides)
        sampling_temperature = overrides.get("sampling", {}).get("temperature")
        if sampling_temperature is not None:  # the update must score what was sampled
            overrides.setdefault("update", {}).setdefault("temperature", sampling_temperature)
        config = apply_overrides(LocalTrainConfig(), overrides)
        summary = train(config)
        print(
            f"held-out success: {summary.eval_success_before:.3f} before RL -> {summary.eval_success_after:.3f} "
            f"after {summary.steps} steps; outputs in {summary.output_dir}"
        )
    elif args.command == "data":
        from verl_mas.dataset import write_dataset

        paths = write_dataset(args.env, args.out, args.train, args.eval, args.seed, parse_overrides(args.options))
        for split, path in paths.items():
            print(f"{split}: {path}")
    elif args.command == "envs":
        from verl_mas.env import env_names, make_env

        for name in env_names():
            workflow = make_env(name).workflow()
            print(f"{name:<12} roles={','.join(workflow.roles)} mode={workflow.mode} max_turns={workflow.max_turns}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
