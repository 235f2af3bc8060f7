"""The `verl-mas` command: demo, train, eval, export, ablate, data, envs, model, doctor."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from verl_mas.local.files import RunError
from verl_mas.overrides import apply_overrides, parse_overrides
from verl_mas.pretrained import PretrainedModelError

USAGE = """\
verl-mas: multi-agent AT-GRPO for verl

  verl-mas demo [key=value ...]   one AT-GRPO batch on a scripted policy: prints the tree and advantages
                                  keys: env, env_options.<name>, tasks, k, alpha, skill, seed, router
                                  e.g.  verl-mas demo env=sudoku env_options='{size: 4, tool_mode: compact}'
  verl-mas train [preset=NAME] [key=value ...]
                                  local AT-GRPO training (tiny model on CPU by default): warm start,
                                  evaluation before and after, metrics.jsonl, learning_curve.png,
                                  checkpoints (resume=true); `verl-mas train --help` lists keys and presets
  verl-mas eval [checkpoint=PATH] [samples=N] [temperature=T] [key=value ...]
                                  independent episodes on the evaluation split; prints success and
                                  per role-turn statistics and writes them as JSON; swap_roles=true
                                  serves each role with the other role's policy (did they specialise?)
  verl-mas export out=DIR [checkpoint=PATH] [key=value ...]
                                  save a run's policies (a checkpoint's, or a fresh warm start's) as
                                  Hugging Face folders that verl, vLLM or any HF loader starts from
  verl-mas ablate grouping [seeds=N] [preset=NAME] [key=value ...]
                                  does grouping matter on this env? per seed one shared warm start, arms
                                  task, task_role and task_role_turn, a paired table with 95% intervals
                                  and group health per arm; `verl-mas ablate --help` says more
  verl-mas data --env NAME --out DIR [--train N] [--eval N] [--seed S] [key=value ...]
                                  write train.parquet / eval.parquet in verl's row format
                                  (key=value pairs are environment options, e.g. size=6)
  verl-mas envs                   list the registered environments and their roles
  verl-mas model [NAME]           the pretrained models that ship in registry packages; with NAME, convert it
                                  once into a Hugging Face folder in the cache and print the folder's path
                                  (the name itself works wherever a model path does)
  verl-mas doctor [--target local|cpu|gpu] [--recipe RECIPE_YAML] [--gpu-memory GIB] [override ...]
                                  is this install right? versions, extras, the verl plugin in a fresh
                                  process, sandbox layers, what can run here; exit 1 when the target
                                  (or recipe: gpu unless --target cpu) lacks something; --gpu-memory
                                  plans each GPU's peak per policy and phase and names what to change
"""


EVAL_HELP = """\
evaluate on the evaluation split (eval_tasks tasks), each task with `samples` independent episodes

eval keys:
  checkpoint   a step_* checkpoint, or a folder holding them (a run's output_dir: its latest);
               empty: evaluate a fresh warm start of the training config
  samples      independent episodes per task (default 1)
  temperature  sampling temperature; 0 (default): greedy
  json         where to write the report (default: eval.json in the checkpoint, or in output_dir;
               eval_swapped.json there when swap_roles or serve serve a role by another policy)
  swap_roles   true: serve each of two roles with the other role's trained policy, e.g. a router=per_role
               checkpoint's plan model plays the tool role and its tool model the plan role; success
               falling well below the unswapped reading says the roles' models specialised
  serve        {role: policy}: which trained policy serves each role, every role named, e.g.
               serve.tool=plan serve.plan=plan (both roles on the plan model); not with swap_roles;
               eval.json's served_by says which policy served each role"""

EXPORT_HELP = """\
save a run's policies as Hugging Face folders (weights, config, tokenizer, chat template): the start of a verl
run (actor_rollout_ref.model.path), of vLLM or of any HF loader

export keys:
  out          the folder to write, new or empty; one policy goes there, several to out/<policy>
  checkpoint   a step_* checkpoint, or a folder holding them (a run's output_dir: its latest);
               empty: a fresh warm start of the training config (e.g. preset=smollm2: the format tune)"""


class _SubcommandParser(argparse.ArgumentParser):
    """A subcommand parser whose description may be built only when help is shown: the training key reference
    imports the whole training stack, which other commands should not pay for."""

    def __init__(self, *args, describe: Callable[[], str] | None = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.describe = describe

    def format_help(self) -> str:
        if self.describe is not None:
            self.description = self.describe()
        return super().format_help()


def _train_help() -> str:
    from verl_mas.local.presets import train_help

    return train_help()


def _ablate_help() -> str:
    from verl_mas.local.ablate import ablate_help

    return ablate_help()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="verl-mas", description=USAGE, formatter_class=argparse.RawTextHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_SubcommandParser)
    demo = sub.add_parser("demo", help="one AT-GRPO batch on a scripted policy")
    demo.add_argument("overrides", nargs="*", help="key=value overrides of the demo config")
    train = sub.add_parser(
        "train",
        help="local AT-GRPO training",
        describe=lambda: "local AT-GRPO training\n\n" + _train_help(),
        formatter_class=argparse.RawTextHelpFormatter,
    )
    train.add_argument("overrides", nargs="*", help="key=value overrides of the training config")
    # eval and export rebuild a run's policies: their own keys, then the training config's
    for name, summary, own_keys in (
        ("eval", "evaluate a checkpoint (or a fresh warm start) on the evaluation split", EVAL_HELP),
        ("export", "save a run's policies (a checkpoint's or a fresh warm start's) as HF folders", EXPORT_HELP),
    ):
        rebuilding = sub.add_parser(
            name,
            help=summary,
            describe=lambda own=own_keys: own + "\n\nthe training keys rebuild the policies:\n" + _train_help(),
            formatter_class=argparse.RawTextHelpFormatter,
        )
        rebuilding.add_argument("overrides", nargs="*", help=f"key=value: {name}'s own keys, then training-config keys")
    ablate = sub.add_parser(
        "ablate",
        help="arms that differ in one training key (grouping), paired per seed from one shared warm start",
        describe=lambda: _ablate_help() + "\n\nthe training keys of every arm:\n" + _train_help(),
        formatter_class=argparse.RawTextHelpFormatter,
    )
    ablate.add_argument("name", help="the ablation: grouping")
    ablate.add_argument("overrides", nargs="*", help="key=value: seeds, then training-config keys")
    data = sub.add_parser("data", help="write train/eval parquet files for an environment")
    data.add_argument("--env", required=True)
    data.add_argument("--out", required=True, type=Path)
    data.add_argument("--train", type=int, default=1024)
    data.add_argument("--eval", type=int, default=100)
    data.add_argument("--seed", type=int, default=0)
    data.add_argument(
        "--options-from",
        type=Path,
        metavar="RECIPE_YAML",
        help="start from a recipe's mas.env_options (the key=value options override them), so the rows match it",
    )
    data.add_argument("options", nargs="*", help="environment options as key=value")
    sub.add_parser("envs", help="list registered environments")
    model = sub.add_parser("model", help="list the registered pretrained models, or prepare one and print its folder")
    model.add_argument("name", nargs="?", help="a registered model name, e.g. smollm2-135m-instruct")
    doctor = sub.add_parser("doctor", help="check the install: versions, extras, plugin, sandbox, what can run here")
    doctor.add_argument(
        "--target",
        choices=("local", "cpu", "gpu"),
        help="fail (exit 1) unless this can run here: the local engine, verl's stack on CPU, or on GPUs",
    )
    doctor.add_argument(
        "--recipe",
        type=Path,
        metavar="RECIPE_YAML",
        help="also check a recipe (its env, sandbox, attention) for --target cpu or gpu (default gpu)",
    )
    doctor.add_argument(
        "--gpu-memory",
        type=float,
        metavar="GIB",
        help="plan each GPU's memory (GiB per GPU, nvidia-smi's total / 1024) for the recipe, or for verl-mas's "
        "defaults without --recipe: peaks per policy and phase, and the keys to change; exit 1 when one overflows",
    )
    doctor.add_argument(
        "--mean-sample-tokens",
        type=int,
        metavar="N",
        help="the mean sample length (prompt and response) the plan of padded batches assumes (default 1024)",
    )
    doctor.add_argument("overrides", nargs="*", help="hydra overrides of the recipe, as python -m verl_mas.main takes")
    args = parser.parse_args(argv)
    try:
        return _dispatch(args)
    except (ValueError, KeyError, RunError, PretrainedModelError) as exc:
        print(f"verl-mas {args.command}: error: {exc.args[0] if exc.args else exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # a file or folder the command needs: name it, as the OS reported it
        where = f": {exc.filename}" if exc.filename else ""
        print(f"verl-mas {args.command}: error: {exc.strerror or exc}{where}", file=sys.stderr)
        return 2


EXPORT_KEYS = ("out", "checkpoint")


def take_export_keys(overrides: dict) -> tuple[str, str]:
    """Pop export's own keys from `overrides`: (out, checkpoint), `out` required and both paths."""
    out, checkpoint = overrides.pop("out", ""), overrides.pop("checkpoint", "")
    if not isinstance(out, str) or not out:
        raise ValueError(f"out: the folder the model goes to is required, e.g. out=runs/tuned_model (got {out!r})")
    if not isinstance(checkpoint, str):
        raise ValueError(f"checkpoint: a path, got {checkpoint!r}")
    return out, checkpoint


def _checkpoint_config(checkpoint_arg: str, overrides: dict, other_keys: tuple[str, ...]):
    """(the checkpoint `checkpoint_arg` names or None, the training config: the checkpoint's own, else the default or
    a preset's, with `overrides` on top); a checkpoint with a preset is refused, as it brings its own config."""
    from verl_mas.local.config import CONFIG_FILE, read_config
    from verl_mas.local.presets import resolve_train_config
    from verl_mas.local.train import find_checkpoint

    try:
        checkpoint = find_checkpoint(checkpoint_arg) if checkpoint_arg else None
    except ValueError as error:
        raise ValueError(f"checkpoint={checkpoint_arg}: {error}") from None
    if checkpoint is not None and "preset" in overrides:
        raise ValueError("preset: a checkpoint brings the config it was trained with; override single keys")
    base = read_config(checkpoint / CONFIG_FILE) if checkpoint is not None else None
    return checkpoint, resolve_train_config(overrides, base, other_keys=other_keys)


def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "demo":
        from verl_mas.demo import demo_config, format_demo, run_demo

        results, metrics = run_demo(demo_config(parse_overrides(args.overrides)))
        print(format_demo(results, metrics))
    elif args.command == "train":
        from verl_mas.local.presets import resolve_train_config
        from verl_mas.local.train import train

        summary = train(resolve_train_config(parse_overrides(args.overrides)))
        print(
            f"held-out success (greedy): {summary.eval_success_before:.3f} before RL -> "
            f"{summary.eval_success_after:.3f} after {summary.steps} steps; outputs in {summary.output_dir}"
        )
        if summary.sampled_success_before is not None:
            print(
                f"held-out success (sampled): {summary.sampled_success_before:.3f} before RL -> "
                f"{summary.sampled_success_after:.3f}"
            )
    elif args.command == "eval":
        from verl_mas.local.evaluate import EvalConfig, evaluate

        overrides = parse_overrides(args.overrides)
        eval_keys = tuple(f.name for f in dataclasses.fields(EvalConfig))
        eval_config = apply_overrides(EvalConfig(), {k: overrides.pop(k) for k in eval_keys if k in overrides})
        checkpoint, config = _checkpoint_config(eval_config.checkpoint, overrides, eval_keys)
        evaluate(config, eval_config, checkpoint)
    elif args.command == "export":
        from verl_mas.local.export import export_policies

        overrides = parse_overrides(args.overrides)
        out, checkpoint_arg = take_export_keys(overrides)
        checkpoint, config = _checkpoint_config(checkpoint_arg, overrides, EXPORT_KEYS)
        export_policies(config, out, checkpoint)
    elif args.command == "ablate":
        from verl_mas.local.ablate import REPORT_JSON, REPORT_MARKDOWN, plan_ablation, run_ablation

        plan = plan_ablation(args.name, parse_overrides(args.overrides))
        print(run_ablation(plan).markdown())
        print(f"\nwritten: {plan.out / REPORT_JSON}, {plan.out / REPORT_MARKDOWN}")
    elif args.command == "data":
        from verl_mas.dataset import write_dataset

        options = {**recipe_env_options(args.options_from, args.env), **parse_overrides(args.options)}
        paths = write_dataset(args.env, args.out, args.train, args.eval, args.seed, options)
        for split, path in paths.items():
            print(f"{split}: {path}")
    elif args.command == "doctor":
        from verl_mas import doctor
        from verl_mas.verl_engine.memory_plan import DEFAULT_MEAN_SAMPLE_TOKENS

        memory = None
        if args.gpu_memory is not None:
            memory = doctor.MemoryRequest(
                args.gpu_memory,
                args.mean_sample_tokens if args.mean_sample_tokens is not None else DEFAULT_MEAN_SAMPLE_TOKENS,
            )
        elif args.mean_sample_tokens is not None:
            raise ValueError("--mean-sample-tokens is an assumption of the memory plan: give --gpu-memory too")
        return doctor.main(args.target, args.recipe, memory=memory, overrides=tuple(args.overrides))
    elif args.command == "model":
        from verl_mas import pretrained

        if args.name is None:
            for name, spec in pretrained.PRETRAINED.items():
                print(f"{name:<24} {spec.distribution}: {spec.note}")
        else:
            folder = pretrained.prepare(args.name, log=lambda line: print(line, file=sys.stderr))
            damaged = pretrained.verify_folder(folder)  # every file's content, not only its size
            if damaged:
                raise pretrained.PretrainedModelError(
                    f"{folder}: {', '.join(damaged)}: content differs from the manifest; delete it to convert again"
                )
            print(folder)
    elif args.command == "envs":
        from verl_mas.env import env_names, make_env

        for name in env_names():
            workflow = make_env(name).workflow()
            print(f"{name:<12} roles={','.join(workflow.roles)} mode={workflow.mode} max_turns={workflow.max_turns}")
    return 0


def recipe_env_options(path: Path | None, env: str) -> dict[str, Any]:
    """`mas.env_options` of the recipe yaml at `path` ({} without one); the recipe must be for `env`."""
    if path is None:
        return {}
    import yaml

    recipe = yaml.safe_load(path.read_text(encoding="utf-8"))
    mas = recipe.get("mas") if isinstance(recipe, dict) else None
    if not isinstance(mas, dict):
        raise ValueError(f"{path}: no mas: group, so no environment options to start from")
    if mas.get("env", env) != env:
        raise ValueError(f"{path}: a recipe for mas.env={mas['env']!r}, not {env!r}")
    options = mas.get("env_options") or {}
    if not isinstance(options, dict):
        raise ValueError(f"{path}: mas.env_options must be a mapping, got {options!r}")
    return options


if __name__ == "__main__":
    sys.exit(main())
