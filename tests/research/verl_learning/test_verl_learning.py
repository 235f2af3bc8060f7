"""research.verl_learning: its paired statistics, verl's mini-batch size, overrides, saved step and the
conversion of verl's L2 checkpoints into the local LoRA model."""

import argparse
import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
from peft import LoraConfig, get_peft_model

from research.verl_cpu import verl_cpu
from research.verl_learning import engines, readings, settings, verl_learning, weights
from verl_mas.local.config import LocalTrainConfig
from verl_mas.local.model import build_tiny_model
from verl_mas.overrides import apply_overrides


def test_paired_change_is_the_mean_difference_with_its_standard_error():
    before = np.array([0.0, 0.5, 1.0, 0.0])
    after = np.array([1.0, 0.5, 1.0, 0.5])
    change = readings.paired(after, before)
    difference = after - before
    assert change["mean"] == pytest.approx(0.375)
    assert change["se"] == pytest.approx(difference.std(ddof=1) / 2)
    assert change["z"] == pytest.approx(change["mean"] / change["se"])
    assert readings.paired(before, before)["z"] is None  # no spread: no z (JSON null, not a bare NaN)
    assert readings.paired(after[:1], before[:1])["se"] is None  # one board: no se
    assert readings.or_dash(None, "+.1f") == "-" and readings.or_dash(-0.26, "+.1f") == "-0.3"


def test_results_are_strict_json_whatever_the_readings():
    nan, inf = float("nan"), float("inf")
    result = {"z": nan, "runs": [{"wall_s": inf, "steps": 3}, (0.5, -inf)], "name": "x", "ok": True}
    strict = {"z": None, "runs": [{"wall_s": None, "steps": 3}, [0.5, None]], "name": "x", "ok": True}
    assert readings.finite_or_null(result) == strict
    assert readings.paired(np.array([nan, 1.0]), np.array([0.0, 0.0]))["z"] is None  # a NaN reading: no z
    assert engines.LoadSampler().summary() == {"min": None, "median": None, "max": None, "readings": 0}


def test_one_mini_batch_holds_every_sample_a_policy_can_get():
    shared = apply_overrides(LocalTrainConfig(), {"tasks_per_step": 16, "k": 4})
    assert settings.samples_per_policy(shared) == 16 * 4 * 3 * 2  # compact Plan-Path: 3 turns, tool and plan
    per_role = apply_overrides(shared, {"router": "per_role"})
    assert settings.samples_per_policy(per_role) == 16 * 4 * 3


def test_both_engine_comparisons_set_the_same_local_keys_from_their_command():
    args = argparse.Namespace(steps=7, tasks_per_step=5, k=3, eval_tasks=9, seed=2, mini_batch=11, router="per_role")
    args.eval_every = 3
    first, learning = verl_cpu.local_config(args, Path("first")), settings.local_config(args, Path("learning"))
    for config in (first, learning):
        shared = (config.steps, config.tasks_per_step, config.k, config.eval_tasks, config.eval_every, config.seed)
        assert shared == (7, 5, 3, 9, 7, 2)  # one evaluation, after the last step
        assert (config.model.heads, config.eval_samples, config.progress) == (2, 0, False)
    assert (first.update.mini_batch_size, first.router, first.checkpoint_every) == (11, "shared", 0)
    assert (learning.router, learning.checkpoint_every) == ("per_role", 3)
    assert (first.output_dir, learning.output_dir) == ("first", "learning")
    assert learning.update.mini_batch_size == LocalTrainConfig().update.mini_batch_size


def test_verls_boards_are_every_training_step_of_the_local_run_and_its_held_out_boards(tmp_path):
    config = apply_overrides(LocalTrainConfig(), {"steps": 3, "tasks_per_step": 2, "eval_tasks": 5})
    verl_cpu.write_boards(config, tmp_path)
    assert pq.read_table(tmp_path / "train.parquet").num_rows == 3 * 2
    assert pq.read_table(tmp_path / "eval.parquet").num_rows == 5


def test_keys_are_replaced_in_place_or_appended():
    base = ["a.b=1", "c=2", "d=x=y"]
    assert settings.with_keys(base, {"c": 3, "e": "z"}) == ["a.b=1", "d=x=y", "c=3", "e=z"]


def test_median_times_skip_the_first_step_and_untimed_phases():
    rows = [{"t": 100.0}, {"t": 1.0}, {"t": 3.0}, {"t": 2.0}]
    assert engines.median_times(rows, {"step": "t", "old_log_prob": None}) == {"step": 2.0, "old_log_prob": None}


def test_saved_step_is_the_last_step_every_policy_saved(tmp_path):
    assert engines.saved_step(tmp_path) == 0
    for policy, step in (("tool", "20"), ("plan", "10")):
        (tmp_path / policy).mkdir()
        (tmp_path / policy / "latest_checkpointed_iteration.txt").write_text(step)
    assert engines.saved_step(tmp_path) == 10


def test_training_spread_reads_verl_against_the_local_runs_mean_and_sd():
    def board_results(greedy):
        return {"greedy": greedy, "sampled": [0.5, 0.5]}

    boards = {
        "local": {0: board_results([0.0, 1.0]), 25: board_results([1.0, 1.0])},  # 0.5, then 1.0
        "verl": {0: board_results([0.0, 1.0]), 25: board_results([0.0, 0.0])},  # 0.5, then 0.0
    }
    spread = {1: {0: board_results([0.0, 1.0]), 25: board_results([0.0, 1.0])}, 2: {0: board_results([0.0, 1.0])}}
    rows = readings.training_spread(boards, spread)["greedy"]
    assert [row["step"] for row in rows] == [0]  # sampler seed 2 has no step 25: only steps every run has
    spread.pop(2)
    first, second = readings.training_spread(boards, spread)["greedy"]
    assert first["verl_in_local_sds"] is None  # every run reads 0.5: no spread
    assert second["local"] == [1.0, 0.5] and second["local_mean"] == pytest.approx(0.75)
    assert second["local_sd"] == pytest.approx(np.std([1.0, 0.5], ddof=1))
    assert second["verl_in_local_sds"] == pytest.approx((0.0 - 0.75) / np.std([1.0, 0.5], ddof=1))


def test_the_compact_record_is_what_the_pages_figures_read(monkeypatch, tmp_path):
    from research.verl_learning import figures

    boards = {
        engine: {
            "0": {"greedy": [1.0, 0.0, 1.0, 0.0], "sampled": [1.0, 0.5, 0.0, 0.5]},
            "25": {"greedy": [1.0, 1.0, 1.0, 0.0], "sampled": [1.0, 1.0, 0.5, 0.0]},
        }
        for engine in settings.ENGINES
    }
    curve = {mode: {"steps": [0, 25], "success": [0.5, 0.75], "change": []} for mode in ("greedy", "sampled")}
    times = {"generation": 1.0, "old_log_prob": None, "advantage": 0.5, "update": 2.0, "step": 3.5}
    raw = {
        "date": "2026-11-26",
        "command": "python -m research.verl_learning",
        "router": "shared",
        "seed": 0,
        "boards": 4,
        "sampled_episodes_per_board": 2,
        "local_torch_threads": 1,
        "verl_minus_local": {},
        "engines": {engine: {"curve": curve, "times": times, "wall_s": 9.0} for engine in settings.ENGINES},
        "local_sampler_runs": {"1": curve},
        "training_spread": {},
        "boards_per_step": boards,
    }
    record = readings.compact_record(raw)
    assert record["board_results"]["verl"]["25"] == {"greedy": "1110", "sampled": "2210"}
    assert record["board_results"]["local"]["0"] == {"greedy": "1010", "sampled": "2101"}
    assert record["steps"] == [0, 25] and record["step_s"]["local"] == times
    assert list(record["curves"]) == ["local", "verl", "local, sampler seed 1"]
    assert record["curves"]["local, sampler seed 1"] == {"greedy": [0.5, 0.75], "sampled": [0.5, 0.75]}
    # the figures read it back: per board 2/2, 2/2, 1/2, 0/2 after against 2/2, 1/2, 0/2, 1/2 before
    assert figures.per_board(record, "verl", 25, "sampled") == [1.0, 1.0, 0.5, 0.0]
    assert figures.change(record, "verl", 25, "sampled")["mean"] == pytest.approx((0 + 0.5 + 0.5 - 0.5) / 4)


def lora_model(adapters: list[str]):
    """The tiny model (same weights every call) as a peft LoRA model holding `adapters`, on q/k/v/o as the preset."""
    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"], lora_dropout=0.0)
    model = get_peft_model(build_tiny_model(vocab_size=32, hidden=16, layers=1, heads=2, seed=3), lora, adapters[0])
    for adapter in adapters[1:]:
        model.add_adapter(adapter, lora)
    return model.eval()


def logits_under(model, adapter: str) -> torch.Tensor:
    model.set_adapter(adapter)
    with torch.no_grad():
        return model(torch.tensor([[1, 5, 7, 2, 9]])).logits


def test_a_verl_l2_checkpoint_loads_into_the_local_lora_model_with_each_roles_own_adapter():
    # verl's tree: the base, verl's own adapter "default" and one adapter per role, every adapter trained (B != 0)
    verl = lora_model(["default", "tool", "plan"])
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, parameter in verl.named_parameters():
            if "lora_" in name:
                parameter.copy_(torch.randn(parameter.shape, generator=generator))
    state = verl.state_dict()
    local = lora_model(["tool", "plan"])
    converted = weights.role_adapters_state(state, ["tool", "plan"])
    assert not any(weights.lora_owner(name) == "default" for name in converted)
    local.load_state_dict(converted)  # strict: the same names, nothing missing, nothing left over
    for role in ("tool", "plan"):
        assert torch.allclose(logits_under(local, role), logits_under(verl, role))
    assert not torch.allclose(logits_under(local, "tool"), logits_under(local, "plan"))  # the adapters matter
    # a conversion that gave tool plan's weights would give another model under tool: this test sees it
    swapped = {
        name.replace(".tool.", ".@.").replace(".plan.", ".tool.").replace(".@.", ".plan."): t
        for name, t in converted.items()
    }
    local.load_state_dict(swapped)
    assert not torch.allclose(logits_under(local, "tool"), logits_under(verl, "tool"))


def test_a_verl_l2_checkpoint_with_other_adapters_than_the_local_model_is_refused():
    state = lora_model(["default", "tool", "plan"]).state_dict()
    with pytest.raises(ValueError, match=r"holds adapters \['plan', 'tool'\], the local model \['tool'\]"):
        weights.role_adapters_state(state, ["tool"])
    with pytest.raises(ValueError, match=r"holds adapters \['tool'\], the local model \['plan', 'tool'\]"):
        weights.role_adapters_state(lora_model(["default", "tool"]).state_dict(), ["tool", "plan"])
    assert weights.lora_owner("base_model.model.model.layers.0.self_attn.q_proj.lora_B.plan.weight") == "plan"
    assert weights.lora_owner("base_model.model.model.layers.0.self_attn.q_proj.base_layer.weight") is None


def test_the_base_change_reads_base_weights_only():
    start = lora_model(["tool"]).state_dict()
    later = {name: tensor.clone() for name, tensor in start.items()}
    adapter = next(name for name in later if weights.lora_owner(name) == "tool")
    later[adapter] += 5.0  # an adapter moving is not the base moving
    assert weights.base_change(later, start) == 0.0
    base = next(name for name in later if name.endswith("q_proj.base_layer.weight"))
    later[base][0, 0] -= 0.25
    assert weights.base_change(later, start) == pytest.approx(0.25)


def test_l2_runs_the_local_preset_and_gives_verl_its_lora_settings_on_one_group():
    args = argparse.Namespace(steps=4, tasks_per_step=2, k=2, eval_tasks=3, seed=0, router="lora_per_role")
    args.eval_every = 2
    config = settings.local_config(args, Path("l2"))
    assert (config.router, config.lora.rank, config.lora.alpha, config.output_dir) == ("per_role", 8, 16.0, "l2")
    overrides = settings.verl_command(config, args, Path("m"), Path("d"), Path("o"))
    assert {
        "mas.router=per_role",
        "mas.lora_per_role=true",
        "actor_rollout_ref.model.lora_rank=8",
        "actor_rollout_ref.model.lora_alpha=16",
        "actor_rollout_ref.model.target_modules=[q_proj,k_proj,v_proj,o_proj]",
        f"actor_rollout_ref.actor.optim.lr={config.update.lr}",
    } <= set(overrides)
    assert not any(o.startswith("trainer.n_gpus_per_node=") for o in overrides)  # one worker group, not one per role


def l2_args(steps: int = 100, **extra) -> argparse.Namespace:
    """At the first L2 designs' budget unless told: their run names carry no steps."""
    return argparse.Namespace(steps=steps, tasks_per_step=2, k=2, eval_tasks=3, seed=0, router="lora_per_role", **extra)


def test_l2s_lr_and_rank_replace_the_presets_and_reach_verl_and_the_run_names():
    args = l2_args(eval_every=2)
    preset = settings.local_config(args, Path("l2"))
    assert (preset.update.lr, preset.lora.rank) == (3e-4, 8) and settings.lora_variant(preset) == ""
    faster = settings.local_config(args, Path("l2"), lr=1e-3)
    assert (faster.update.lr, faster.lora.rank, faster.lora.alpha) == (1e-3, 8, 16.0)
    assert settings.lora_variant(faster) == "_lr0.001"
    wider = settings.local_config(args, Path("l2"), lr=3e-3, rank=16)
    assert settings.lora_variant(wider) == "_lr0.003_r16"
    # only the rank differs: named, so that it never reuses the preset's work folder
    assert settings.lora_variant(settings.local_config(args, Path("l2"), rank=16)) == "_lr0.0003_r16"
    overrides = settings.verl_command(wider, args, Path("m"), Path("d"), Path("o"))
    assert {"actor_rollout_ref.actor.optim.lr=0.003", "actor_rollout_ref.model.lora_rank=16"} <= set(overrides)
    # another router: no adapters, no suffix, the lr untouched
    shared = settings.local_config(argparse.Namespace(**(vars(args) | {"router": "shared"})), Path("s"), lr=1e-3)
    assert (shared.update.lr, shared.lora.rank, settings.lora_variant(shared)) == (3e-4, 0, "")


def test_l2_runs_at_another_budget_never_take_the_first_budgets_folders_or_records():
    longer = l2_args(steps=200, eval_every=25)
    assert settings.lora_variant(settings.local_config(longer, Path("l2"))) == "_steps200"
    assert settings.lora_variant(settings.local_config(longer, Path("l2"), lr=1e-3)) == "_lr0.001_steps200"
    first = settings.local_config(l2_args(eval_every=25), Path("l2"), lr=1e-3)
    assert settings.lora_variant(first) == "_lr0.001"  # the second design's pilot's folder, as it ran
    shared = argparse.Namespace(**(vars(longer) | {"router": "shared"}))  # other routers: one budget per router
    assert settings.lora_variant(settings.local_config(shared, Path("s"))) == ""
    assert settings.pilot_record_name("lora_per_role", 3, 100) == "lora_per_role_pilot_seed3.json"
    assert settings.pilot_record_name("lora_per_role", 3, 200) == "lora_per_role_pilot_seed3_steps200.json"


def test_l2s_adapted_modules_replace_the_presets_and_reach_verl_the_run_names_and_the_pilot_record():
    mlp = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
    config = settings.local_config(l2_args(steps=200, eval_every=25), Path("l2"), lr=1e-3, targets=mlp)
    assert (config.lora.target_modules, config.lora.rank, config.update.lr) == (mlp, 8, 1e-3)
    suffix = "_targets-q_proj-k_proj-v_proj-o_proj-gate_proj-up_proj-down_proj"
    assert settings.lora_variant(config) == "_lr0.001_steps200" + suffix  # never the third design's folder
    assert settings.targets_variant(config) == suffix
    overrides = settings.verl_command(config, l2_args(eval_every=25), Path("m"), Path("d"), Path("o"))
    assert f"actor_rollout_ref.model.target_modules=[{','.join(mlp)}]" in overrides
    assert settings.pilot_record_name("lora_per_role", 3, 200, suffix) == (
        f"lora_per_role_pilot_seed3_steps200{suffix}.json"
    )
    # the preset's modules named explicitly are the preset: no suffix, the earlier runs' folders
    preset_modules = ("q_proj", "k_proj", "v_proj", "o_proj")
    same = settings.local_config(l2_args(eval_every=25), Path("l2"), targets=preset_modules)
    assert settings.lora_variant(same) == "" and settings.targets_variant(same) == ""


def test_replication_seeds_have_their_own_work_folder_and_records():
    assert settings.seed_work(0) == settings.WORK
    assert settings.seed_work(2) == settings.WORK / "seed_2"
    assert settings.record_name("shared", 0) == "shared.json"  # seed 0's committed data keeps its name
    assert settings.record_name("per_role", 1) == "per_role_seed1.json"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--router", "shared", "--lora-lr", "1e-3"], "--lora-rank and --lora-targets set L2's adapters"),
        (["--router", "per_role", "--lora-rank", "16", "--local-only"], "--lora-rank and --lora-targets set L2's"),
        (["--router", "shared", "--lora-targets", "q_proj"], "--lora-lr, --lora-rank and --lora-targets set L2's"),
        (["--router", "lora_per_role", "--lora-lr", "1e-3", "3e-3"], "several --lora-lr values are a pilot's arms"),
    ],
)
def test_lora_options_that_cannot_mean_anything_are_refused_before_any_run(argv, message, capsys):
    with pytest.raises(SystemExit):
        verl_learning.main(argv)
    assert message in capsys.readouterr().err


def test_the_pilot_trains_and_reads_each_arm_in_its_own_folder(monkeypatch, tmp_path):
    base = {"base_model.w": torch.zeros(2), "base_model.q_proj.lora_B.tool.weight": torch.zeros(2)}
    trained = []

    def run_local(config, model):  # an arm's checkpoints: its adapter moved by its lr, the base by 0.5 at lr 3e-3
        folder = Path(config.output_dir)
        trained.append((config.update.lr, folder.parent.name))
        step = {name: t + (config.update.lr if "lora" in name else 0.0) for name, t in base.items()}
        step["base_model.w"] = step["base_model.w"] + (0.5 if config.update.lr == 3e-3 else 0.0)
        checkpoints[folder] = {2: {verl_learning.LORA_BASE_MODEL: step}}
        return {"wall_s": 1.0, "times": {"step": 0.5}}

    class Evaluator:  # board 0 solved once the adapter has moved, board 1 never
        def __init__(self, config, samples):
            model = argparse.Namespace(state_dict=lambda: base)
            self.run = argparse.Namespace(models={verl_learning.LORA_BASE_MODEL: model})

        def __call__(self, weights):
            moved = float(weights[verl_learning.LORA_BASE_MODEL]["base_model.q_proj.lora_B.tool.weight"][0] > 0)
            return {"greedy": [moved, 0.0], "sampled": [moved / 2, 0.0]}

    checkpoints: dict[Path, dict] = {}
    monkeypatch.setattr(verl_learning, "seed_work", lambda seed: tmp_path / f"seed_{seed}")
    monkeypatch.setattr(verl_learning, "warm_start", lambda args, root: root / "model")
    monkeypatch.setattr(verl_learning, "run_local", run_local)
    monkeypatch.setattr(verl_learning, "Evaluator", Evaluator)
    monkeypatch.setattr(verl_learning, "local_checkpoints", lambda folder: checkpoints[folder.parent])
    (tmp_path / "seed_3").mkdir()
    argv = ["--router", "lora_per_role", "--local-only", "--seed", "3", "--steps", "2", "--eval-every", "2"]
    verl_learning.main([*argv, "--lora-lr", "1e-3", "3e-3", "--out", str(tmp_path / "out")])
    assert trained == [(1e-3, "lora_per_role_lr0.001_steps2"), (3e-3, "lora_per_role_lr0.003_steps2")]
    record = json.loads((tmp_path / "out" / "lora_per_role_pilot_seed3_steps2.json").read_text())
    assert record["seed"] == 3 and record["command"].endswith("--seed 3 --lora-lr 0.001 0.003")
    assert list(record["arms"]) == ["lr 0.001, rank 8", "lr 0.003, rank 8"]
    arm = record["arms"]["lr 0.001, rank 8"]
    assert arm["board_results"] == {"0": {"greedy": "00", "sampled": "00"}, "2": {"greedy": "10", "sampled": "10"}}
    assert (arm["lr"], arm["rank"], arm["alpha"], arm["base_change_max"]) == (1e-3, 8, 16.0, 0.0)
    assert arm["target_modules"] == ["q_proj", "k_proj", "v_proj", "o_proj"]
    assert record["arms"]["lr 0.003, rank 8"]["base_change_max"] == 0.5  # a moved base is reported, not hidden
    # other adapted modules: their own folder and record, named in the arm and the command
    verl_learning.main(
        [*argv, "--lora-lr", "1e-3", "--lora-targets", "q_proj", "v_proj", "--out", str(tmp_path / "out")]
    )
    assert trained[-1] == (1e-3, "lora_per_role_lr0.001_steps2_targets-q_proj-v_proj")
    narrow = json.loads((tmp_path / "out" / "lora_per_role_pilot_seed3_steps2_targets-q_proj-v_proj.json").read_text())
    assert narrow["command"].endswith("--lora-lr 0.001 --lora-targets q_proj v_proj")
    assert narrow["arms"]["lr 0.001, rank 8"]["target_modules"] == ["q_proj", "v_proj"]
    assert list(json.loads((tmp_path / "out" / "lora_per_role_pilot_seed3_steps2.json").read_text())["arms"]) == [
        "lr 0.001, rank 8",
        "lr 0.003, rank 8",
    ]  # the first pilot's record is untouched
