"""Tests of the command line, overrides, scripted policy and metrics."""

from __future__ import annotations

import asyncio
import dataclasses
import json

import numpy as np
import pytest

from mas_testkit import ScriptedGenerator, spread_script
from verl_mas.cli import main
from verl_mas.dataset import read_tasks
from verl_mas.demo import DemoConfig
from verl_mas.env import Task
from verl_mas.local.config import LocalTrainConfig
from verl_mas.local.presets import PRESETS, resolve_train_config
from verl_mas.metrics import rollout_metrics
from verl_mas.overrides import apply_overrides, parse_overrides
from verl_mas.rollout import GenerationRequest, RolloutConfig, rollout_tasks
from verl_mas.router import PolicyRouter
from verl_mas.scripted import ExpertMixPolicy


def test_parse_overrides_nests_and_types_values():
    assert parse_overrides(["k=8", "env_options.size=6", "alpha=0.5", "env=sudoku", "flag=true"]) == {
        "k": 8,
        "env_options": {"size": 6},
        "alpha": 0.5,
        "env": "sudoku",
        "flag": True,
    }
    assert parse_overrides(["update.lr=3e-5", "name=3e-5x", "n=inf"]) == {
        "update": {"lr": 3e-5},
        "name": "3e-5x",
        "n": float("inf"),
    }
    with pytest.raises(ValueError, match="not of the form key=value"):
        parse_overrides(["k8"])


def test_apply_overrides_merges_mappings_and_names_bad_keys():
    config = apply_overrides(DemoConfig(), {"k": 2, "alpha": 1, "env_options": {"size": 5}})
    assert config.k == 2 and config.alpha == 1.0 and isinstance(config.alpha, float)
    assert config.env_options == {**DemoConfig().env_options, "size": 5}
    with pytest.raises(ValueError, match="unknown config key 'kk'; known keys: .*k,"):
        apply_overrides(DemoConfig(), {"kk": 1})
    with pytest.raises(ValueError, match="'k' expects an integer"):
        apply_overrides(DemoConfig(), {"k": "eight"})


def test_demo_prints_tree_and_metrics(capsys):
    assert main(["demo", "tasks=2", "k=3", "seed=1"]) == 0
    out = capsys.readouterr().out
    assert "Tree of verl_mas/plan_path/train/0" in out and "rollout/success" in out
    assert out.count("*") >= 2  # at least one continued branch per role


@pytest.mark.parametrize("options", [[], ["env_options={size: 4, tool_mode: compact}"]])
def test_demo_on_another_env_drops_the_default_envs_options(capsys, options):
    """The usage line's own example: Plan-Path's default options (wall_ratio) must not reach Sudoku."""
    assert main(["demo", "env=sudoku", *options, "tasks=1", "k=2"]) == 0, capsys.readouterr().err
    assert "Tree of verl_mas/sudoku/train/0" in capsys.readouterr().out


def test_demo_is_deterministic(capsys):
    main(["demo", "tasks=2", "k=3", "seed=5"])
    first = capsys.readouterr().out
    main(["demo", "tasks=2", "k=3", "seed=5"])
    assert capsys.readouterr().out == first


def test_cli_errors_name_the_problem(capsys):
    assert main(["demo", "nope=1"]) == 2
    assert "unknown config key 'nope'" in capsys.readouterr().err
    assert main(["demo", "env=no_such_env"]) == 2
    assert "unknown environment 'no_such_env'; known:" in capsys.readouterr().err


def test_data_command_writes_both_splits(tmp_path, capsys):
    assert main(["data", "--env", "sudoku", "--out", str(tmp_path), "--train", "3", "--eval", "2", "size=4"]) == 0
    assert (tmp_path / "train.parquet").exists() and (tmp_path / "eval.parquet").exists()


def test_expert_mix_policy_needs_the_expert_and_mixes_it():
    request = GenerationRequest("t/a", "p", "a", ({"role": "user", "content": "x"},), n=64, expert="U R R D")
    texts = [g.text for g in asyncio.run(ExpertMixPolicy(skill=0.5, seed=0)(request))]
    assert 10 < texts.count("U R R D") < 54 and len(set(texts)) > 1
    with pytest.raises(ValueError, match="with_expert=True"):
        asyncio.run(ExpertMixPolicy()(dataclasses.replace(request, expert=None)))


def counter_rollout(target: int, **options) -> list:
    """One counter task rolled out with K = 5 scripted candidates -1, 0, 1, 2, 3 for every role (roles a and b)."""
    from mas_testkit import CounterEnv

    def factory(task):
        env = CounterEnv(**options)
        env.reset(task)
        env.target = target
        return env

    gen, router = ScriptedGenerator(spread_script), PolicyRouter.from_spec("shared", ("a", "b"))
    return asyncio.run(rollout_tasks([Task("t0", "counter", 0)], gen, router, RolloutConfig(k=5), factory))


def test_rollout_metrics_hand_computed():
    metrics = rollout_metrics(counter_rollout(5))
    assert metrics["rollout/success"] == 1.0 and metrics["rollout/samples"] == 10
    assert metrics["rollout/a/turn0/team_reward"] == pytest.approx((-0.2 + 0 + 0.2 + 0.4 + 0.6) / 5)
    assert metrics["rollout/a/turn0/response_length"] == pytest.approx((2 + 1 + 1 + 1 + 1) / 5)
    assert metrics["rollout/zero_variance_share"] == 0.0


def test_rollout_metrics_leave_out_samples_the_judge_could_not_run():
    (result,) = counter_rollout(9, max_turns=1)
    # an unjudged sixth candidate of a's turn 0, with a score that would move every statistic it entered
    failed = dataclasses.replace(result.samples[0], branch=5, reward=-50.0, valid=False, infra_failure="fork failed")
    assert failed.role == "a" and failed.turn == 0
    with_failed = dataclasses.replace(result, samples=[*result.samples, failed])
    assert rollout_metrics([with_failed]) == rollout_metrics([result])


def test_rollout_metrics_per_role_and_overall_hand_computed():
    metrics = rollout_metrics(counter_rollout(9, max_turns=1))
    # a moves from 0 (best: 3, value 3); b from 3. Team reward 1 - |9 - v| / 9, local = progress / 3.
    a_rewards = [(1 - (9 - d) / 9) + d / 3 for d in (-1, 0, 1, 2, 3)]
    b_rewards = [(1 - (6 - d) / 9) + d / 3 for d in (-1, 0, 1, 2, 3)]
    assert metrics["rollout/a/reward"] == pytest.approx(sum(a_rewards) / 5)
    assert metrics["rollout/reward"] == pytest.approx(sum(a_rewards + b_rewards) / 10)
    assert metrics["rollout/response_length"] == pytest.approx((2 + 1 + 1 + 1 + 1) / 5)
    assert metrics["rollout/b/turn0/samples"] == 5 and metrics["rollout/b/invalid_move_share"] == 0.0
    assert metrics["rollout/a/group_reward_std"] == pytest.approx(float(np.std(a_rewards)))


def test_every_preset_builds_a_valid_config_and_presets_compose():
    for name in PRESETS:
        resolve_train_config({"preset": name})
    config = resolve_train_config(parse_overrides(["preset=[smoke,lora_per_role]", "k=3", "sampling.temperature=0.5"]))
    assert (config.router, config.lora.rank, config.k, config.model.hidden) == ("per_role", 8, 3, 32)
    assert config.output_dir == "runs/lora_per_role" and config.update.temperature == 0.5
    assert resolve_train_config({"preset": "single_agent"}).env_options["single_agent"] is True
    assert resolve_train_config({"preset": "no_tree"}).rollout_mode == "independent"
    assert resolve_train_config({"preset": "grouping_task"}).grouping == "task"
    assert resolve_train_config({"env": "sudoku", "env_options": {"size": 4}}).env_options == {"size": 4}
    single_sudoku = resolve_train_config({"preset": "single_agent", "env": "sudoku"})
    assert (single_sudoku.env, single_sudoku.env_options) == ("sudoku", {"single_agent": True})
    # Another env drops the warm start's env options too: plan_path's board size is no sudoku option.
    warm_small = resolve_train_config(parse_overrides(["warm_start.env_options.size=4"]))
    assert warm_small.warm_start.env_options == {"size": 4}
    assert resolve_train_config({"env": "sudoku"}, base=warm_small).warm_start.env_options == {}


def test_union_typed_keys_take_any_of_their_types():
    assert resolve_train_config(parse_overrides(["resume=true"])).resume is True
    assert resolve_train_config(parse_overrides(["resume=runs/x/checkpoints"])).resume == "runs/x/checkpoints"
    with pytest.raises(ValueError, match="'resume' expects bool or str, got 3"):
        resolve_train_config(parse_overrides(["resume=3"]))
    assert resolve_train_config(parse_overrides(["update.grad_clip=null"])).update.grad_clip is None
    assert resolve_train_config(parse_overrides(["update.grad_clip=2"])).update.grad_clip == 2.0
    assert resolve_train_config(parse_overrides(["lora.target_modules=[q_proj]"])).lora.target_modules == ("q_proj",)


@pytest.mark.parametrize(
    "args, message",
    [
        (["preset=fast"], "unknown preset 'fast'; known presets: default, smoke, single_agent,"),
        (["kk=1"], "unknown config key 'kk'; known keys: alpha, checkpoint_every,"),
        (["model.hiden=3"], "unknown config key 'model.hiden'; known keys: heads, hidden,"),
        (["env=no_such_env"], "unknown environment 'no_such_env'; known: "),
        (["router={tool: a, planner: b}"], "unknown role(s) ['planner'] in mapping; the environment's roles are"),
        (["env_options.colour=red"], "bad options for environment 'plan_path'"),
        (["warm_start.env_options.colour=red"], "warm_start.env_options: bad options for environment 'plan_path'"),
        (
            ["warm_start.env_options.single_agent=true"],
            "warm_start.env_options give the roles ['plan'], but training has ['tool', 'plan']",
        ),
        (["rollout_mode=forest"], "rollout_mode must be 'tree' or 'independent'"),
    ],
)
def test_train_errors_name_the_problem_and_the_alternatives(tmp_path, capsys, args, message):
    assert main(["train", *args, f"output_dir={tmp_path}"]) == 2
    assert message in capsys.readouterr().err


def test_eval_errors_list_eval_keys_too(capsys):
    assert main(["eval", "sample=2"]) == 2
    assert "unknown config key 'sample'; known keys: " in (err := capsys.readouterr().err) and "samples" in err
    assert main(["eval", "samples=0"]) == 2
    assert "samples must be an integer >= 1, got 0" in capsys.readouterr().err


def test_train_help_explains_every_key_and_lists_presets(capsys):
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    out = capsys.readouterr().out
    for name in PRESETS:
        assert f"  {name} " in out
    for field in dataclasses.fields(LocalTrainConfig):
        assert f"  {field.name} " in out or f"  {field.name}.* " in out
    assert "lr=0.0003" in out  # nested keys show their live defaults


def test_eval_of_a_fresh_warm_start_writes_its_report(tmp_path, capsys):
    assert main(["eval", "preset=smoke", "eval_tasks=1", f"output_dir={tmp_path}", "progress=false"]) == 0
    report = json.loads((tmp_path / "eval.json").read_text())
    assert (report["checkpoint"], report["step"], report["tasks"], report["samples"]) == ("", 0, 1, 1)
    assert set(report["success"]) == {"plan_path"} and {row["role"] for row in report["role_turns"]} <= {"tool", "plan"}
    assert "evaluation of a fresh warm start: 1 tasks x 1 samples, greedy" in capsys.readouterr().out


def test_numbers_in_nested_yaml_are_numbers_too():
    config = resolve_train_config(parse_overrides(["update={eps: 1e-8, grad_clip: 1e-1}", "warm_start={lr: 2e-3}"]))
    assert (config.update.eps, config.update.grad_clip, config.warm_start.lr) == (1e-8, 0.1, 2e-3)
    with pytest.raises(ValueError, match="'update.eps' expects a number, got 'tiny'"):
        resolve_train_config(parse_overrides(["update={eps: tiny}"]))


def test_data_command_starts_from_a_recipes_environment_options(tmp_path):
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("mas:\n  env: sudoku\n  env_options:\n    size: 4\n    max_turns: 2\n")
    assert main(["data", "--env", "sudoku", "--out", str(tmp_path / "d"), "--train", "2", "--eval", "1",
                 "--options-from", str(recipe), "max_turns=3"]) == 0  # fmt: skip
    [task, _] = read_tasks(tmp_path / "d" / "train.parquet")
    assert task.options == {"size": 4, "max_turns": 3}  # the recipe's, with the command line's on top


@pytest.mark.parametrize(
    "text, message",
    [
        ("trainer: {}\n", "no mas: group"),
        ("mas:\n  env: code\n", "a recipe for mas.env='code', not 'sudoku'"),
        ("mas:\n  env_options: [1, 2]\n", "mas.env_options must be a mapping"),
    ],
)
def test_data_command_refuses_a_recipe_it_cannot_use(tmp_path, capsys, text, message):
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(text)
    args = ["data", "--env", "sudoku", "--out", str(tmp_path / "d"), "--options-from", str(recipe)]
    assert main(args) == 2
    assert message in capsys.readouterr().err and not (tmp_path / "d").exists()


def test_export_writes_a_checkpoints_weights_as_a_hugging_face_folder(tmp_path, capsys):
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    run = tmp_path / "run"
    assert main(["train", "preset=smoke", "steps=1", "checkpoint_every=1", "eval_tasks=1", f"output_dir={run}"]) == 0
    before = json.loads((run / "metrics.jsonl").read_text().splitlines()[0])
    assert before["step"] == 0 and before["time/eval_s"] > 0  # the evaluation before RL is timed as later ones are
    assert main(["export", f"out={tmp_path / 'hf'}", f"checkpoint={run}", "progress=false"]) == 0
    trained = torch.load(run / "checkpoints" / "step_00000001" / "model_shared.pt", weights_only=True)
    exported = load_file(tmp_path / "hf" / "model.safetensors")
    assert set(trained) - set(exported) <= {"lm_head.weight"} <= set(trained)  # only the tied output layer is left out
    assert set(exported) <= set(trained)
    assert all(torch.equal(exported[name], trained[name]) for name in exported)
    model = AutoModelForCausalLM.from_pretrained(str(tmp_path / "hf"))  # the folder loads as any HF model does
    tokenizer = AutoTokenizer.from_pretrained(str(tmp_path / "hf"))
    assert model.config.vocab_size >= len(tokenizer)
    assert f"export: policy shared -> {tmp_path / 'hf'}" in capsys.readouterr().out
    assert main(["export", f"out={tmp_path / 'hf'}", f"checkpoint={run}"]) == 2  # never over another export
    assert "is not empty; choose a new directory" in capsys.readouterr().err
    assert main(["export", f"checkpoint={run}"]) == 2
    assert "out: the folder the model goes to is required" in capsys.readouterr().err
    assert main(["export", "out=null", f"checkpoint={run}"]) == 2  # YAML's null is no folder name
    assert "out: the folder the model goes to is required" in capsys.readouterr().err
    assert main(["export", f"out={tmp_path / 'other'}", f"checkpoint={run}", "preset=smoke"]) == 2
    assert "preset: a checkpoint brings the config it was trained with" in capsys.readouterr().err
