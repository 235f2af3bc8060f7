"""The memory plan against hand-computed cases: parameter counts from the architecture numbers, offload and its
reload for the update, padded against packed micro-batches, a KV cache too small for the sequences in flight; the
doctor's `--gpu-memory` report, the start-time warning and the attention path chosen at start. LoRA's plan is in
test_memory_plan_lora.py."""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from verl_mas import doctor
from verl_mas.cli import main as cli_main
from verl_mas.main import check_attention, fill_attention, first_gpu_gib, warn_memory_plan
from verl_mas.verl_engine.memory_plan import micro_batch_tokens, plan_memory, plan_policy, plan_warnings
from verl_mas.verl_engine.memory_settings import PolicySettings
from verl_mas.verl_engine.model_shape import GIB, KNOWN_SHAPES, ModelShape, model_shape

REPO = Path(__file__).resolve().parents[3]
MATH = REPO / "recipes" / "math" / "math.yaml"
QWEN3_1_7B = KNOWN_SHAPES["Qwen/Qwen3-1.7B"]
QWEN3_8B = KNOWN_SHAPES["Qwen/Qwen3-8B"]
# launch.sh's overrides for an 8B per_role math run on 8 GPUs of one node
MATH_8B_PER_ROLE = (
    "actor_rollout_ref.model.path=Qwen/Qwen3-8B",
    "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
    "actor_rollout_ref.rollout.gpu_memory_utilization=0.5",
    "trainer.n_gpus_per_node=8",
    "mas.router=per_role",
    "actor_rollout_ref.actor.fsdp_config.optimizer_offload=true",
)
SDPA = "actor_rollout_ref.model.override_config.attn_implementation=sdpa"


def settings(**changes) -> PolicySettings:
    """Qwen3-1.7B, one shared policy on 8 GPUs, packed micro-batches of 16384 tokens, vLLM TP 1 at 0.6."""
    base = PolicySettings(
        policy="shared",
        model_path="Qwen/Qwen3-1.7B",
        shape=QWEN3_1_7B,
        shape_source="table",
        gpus=8,
        roles=("tool", "plan"),
        parallel=False,
        tasks=32,
        k=8,
        prompt_tokens=4096,
        response_tokens=2048,
        mean_sample_tokens=1024,
        model_bytes=4,
        param_offload=False,
        optimizer_offload=False,
        remove_padding=True,
        gradient_checkpointing=True,
        dynamic_batch=True,
        update_tokens=16384,
        log_prob_tokens=16384,
        tp=1,
        gpu_memory_utilization=0.6,
        max_num_seqs=256,
        max_num_batched_tokens=8192,
        prefix_caching=True,
        sleeps=True,
        kv_bytes=2,
    )
    return dataclasses.replace(base, **changes)


def parts(peak) -> dict[str, float]:
    return dict(peak.parts)


def test_parameter_counts_come_from_the_architecture_numbers():
    # per layer: q, k, v, o projections, q/k norms, gate/up/down, two RMSNorms; then embeddings (+ lm_head), norm
    layer = 2048 * 2048 + 2 * 2048 * 1024 + 2048 * 2048 + 2 * 128 + 3 * 2048 * 6144 + 2 * 2048
    assert QWEN3_1_7B.layer_params == layer == 50_336_000
    assert QWEN3_1_7B.params == 28 * layer + 151936 * 2048 + 2048 == 1_720_574_976  # tied embeddings
    layer = 4096 * 4096 + 2 * 4096 * 1024 + 4096 * 4096 + 2 * 128 + 3 * 4096 * 12288 + 2 * 4096
    assert QWEN3_8B.params == 36 * layer + 2 * 151936 * 4096 + 4096 == 8_190_735_360  # untied lm_head
    # the model cards: 1.4B and 6.95B without the embeddings
    assert round(28 * QWEN3_1_7B.layer_params / 1e9, 1) == 1.4 and round(36 * QWEN3_8B.layer_params / 1e9, 2) == 6.95


def test_a_readable_config_json_wins_over_the_table_and_an_unknown_model_is_named(tmp_path):
    hf = {
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "intermediate_size": 128,
        "vocab_size": 1000,
        "tie_word_embeddings": True,
    }
    (tmp_path / "config.json").write_text(json.dumps(hf))
    shape, source = model_shape(str(tmp_path))
    assert shape == ModelShape(64, 2, 4, 2, 16, 128, 1000, tied=True)  # head_dim = hidden / heads when absent
    assert source == str(tmp_path / "config.json")
    assert model_shape("Qwen/Qwen3-8B")[0] == QWEN3_8B
    with pytest.raises(ValueError, match=r"^mas\.policies\.tool\.model_path='/nowhere/model': no readable config"):
        model_shape("/nowhere/model", "mas.policies.tool.model_path")


def test_the_update_reloads_the_offloaded_optimizer_shard_the_rollout_does_not_hold_it():
    P = 1_720_574_976
    kept, offloaded = plan_policy(settings(), 80 * GIB), plan_policy(settings(optimizer_offload=True), 80 * GIB)
    shard = P * 8 / 8  # AdamW's two fp32 moments over 8 GPUs
    assert parts(kept.update)["optimizer"] == parts(offloaded.update)["optimizer"] == shard
    assert kept.update.total == offloaded.update.total
    assert kept.rollout.total - offloaded.rollout.total == shard
    assert parts(offloaded.log_prob)["optimizer"] == 0  # the log-prob pass loads the parameters only
    # the whole update peak by hand: shards, gathered units, checkpointed activations, logits
    layer, root = 50_336_000, 151936 * 2048 + 2048
    tokens = 16384
    per_token_layer = 2 * (4 * 2048 + 3 * 2048 + 3 * 1024 + 4 * 6144) * 2
    expected = (
        P * 4 / 8  # fp32 parameters
        + P * 4 / 8  # fp32 gradients
        + shard
        + (root + 2 * layer) * 2  # root unit and two layers unsharded in bf16
        + root * 4  # the largest unit's fp32 gradient
        + tokens * (28 * 2048 * 2 + per_token_layer)  # saved layer inputs + one layer recomputed
        + tokens * 151936 * 4  # logits
    )
    assert kept.update.total == pytest.approx(expected, rel=1e-12)
    assert kept.rollout.total == P * 4 / 8 + shard + 0.6 * 80 * GIB


def test_8b_per_role_update_holds_about_33_gb_of_shards_per_gpu_despite_optimizer_offload():
    plan = plan_policy(settings(shape=QWEN3_8B, gpus=4, optimizer_offload=True), 80 * GIB)
    shards = sum(parts(plan.update)[name] for name in ("params", "grads", "optimizer"))
    assert shards == 8_190_735_360 * (4 + 4 + 8) / 4
    assert round(shards / 1e9) == 33


def test_padded_micro_batches_compute_up_to_samples_times_the_longest():
    # one sample at the cap (4096 + 2048) and the rest at 1024 fill 16384 real tokens: 1 + 10240 // 1024 = 11
    assert micro_batch_tokens(16384, 6144, 1024, packed=False) == 11 * 6144 == 67584
    assert micro_batch_tokens(16384, 6144, 1024, packed=True) == 16384
    # short caps: the padded ratio nears longest / mean (2048 / 512 = 4): 1 + 14336 // 512 = 29 samples
    assert micro_batch_tokens(16384, 2048, 512, packed=False) / 16384 == 29 * 2048 / 16384 == 3.625
    padded, packed = plan_policy(settings(remove_padding=False), 80 * GIB), plan_policy(settings(), 80 * GIB)
    assert parts(padded.update)["logits"] / parts(packed.update)["logits"] == 67584 / 16384
    assert padded.micro_batch_tokens == 67584 and packed.micro_batch_tokens == 16384
    assert padded.attention.startswith("padded (sdpa") and packed.attention.startswith("packed (flash_attention_2")


def test_a_kv_cache_too_small_for_the_sequences_in_flight_warns_that_vllm_preempts():
    # 8B, code's two roles answering at once, one role per policy, 4 replicas: 32 groups / 4 = 8 groups of K = 8
    s = settings(
        shape=QWEN3_8B, gpus=4, roles=("coder",), parallel=True, prompt_tokens=6144, response_tokens=4096,
        gpu_memory_utilization=0.5,
    )  # fmt: skip
    plan = plan_policy(s, 80 * GIB)
    per_token = 36 * 2 * 8 * 128 * 2
    assert plan.kv.replicas == 4 and plan.kv.sequences_per_replica == 64
    assert plan.kv.needed == (64 * 4096 + 8 * 6144) * per_token  # the K candidates share their prompt's blocks
    weights = 8_190_735_360 * 2
    profile = 8192 * (3 * 12288 + 4 * 4096) * 2 + 256 * 151936 * 4
    assert plan.kv.budget == pytest.approx(0.5 * 80 * GIB - weights - profile)
    (warning,) = plan_warnings(plan, 80 * GIB)
    assert not warning.fatal and warning.what.startswith("vLLM preempts: 64 sequences per replica")
    assert warning.keys[0].startswith("actor_rollout_ref.rollout.gpu_memory_utilization")
    # max_num_seqs caps a replica's sequences; without prefix caching each sequence holds its own prompt
    capped = plan_policy(dataclasses.replace(s, max_num_seqs=16), 80 * GIB)
    assert capped.kv.needed == (16 * 4096 + 2 * 6144) * per_token
    unshared = plan_policy(dataclasses.replace(s, prefix_caching=False), 80 * GIB)
    assert unshared.kv.needed == 64 * (6144 + 4096) * per_token


def test_a_peak_over_the_device_warns_naming_the_keys_to_change():
    padded = plan_policy(settings(shape=QWEN3_8B, remove_padding=False), 80 * GIB)
    fatal = [w for w in plan_warnings(padded, 80 * GIB) if w.fatal]
    assert [w.what.split(" peaks")[0] for w in fatal] == ["the update"]
    assert fatal[0].keys[:2] == (
        "actor_rollout_ref.model.use_remove_padding=true (with flash-attn)",
        "actor_rollout_ref.actor.ppo_max_token_len_per_gpu (lower)",
    )
    rollout = plan_policy(settings(gpu_memory_utilization=0.99), 80 * GIB)
    (too_big,) = plan_warnings(rollout, 80 * GIB)
    assert too_big.fatal and too_big.what.startswith("the rollout peaks at")
    assert "actor_rollout_ref.actor.fsdp_config.optimizer_offload=true" in too_big.keys
    short = plan_policy(settings(update_tokens=4096), 80 * GIB)
    assert any("ppo_max_token_len_per_gpu=4096 is below a sample at the length caps (6144" in w.what
               for w in plan_warnings(short, 80 * GIB))  # fmt: skip
    with pytest.raises(ValueError, match="--gpu-memory must be a positive number"):
        plan_memory(OmegaConf.create({}), 0)


@pytest.fixture(scope="module")
def math_8b_per_role():
    return doctor.composed(MATH, "gpu", MATH_8B_PER_ROLE)


def test_the_plan_reads_the_composed_recipe(math_8b_per_role):
    plan = plan_memory(math_8b_per_role, 80)
    assert [p.settings.policy for p in plan.policies] == ["reasoner", "tool"]
    reasoner = plan.policies[0].settings
    assert (reasoner.roles, reasoner.parallel, reasoner.gpus, reasoner.tp, reasoner.k) == (("reasoner",), True, 4, 1, 8)
    assert (reasoner.prompt_tokens, reasoner.response_tokens, reasoner.update_tokens) == (4096, 4096, 16384)
    assert reasoner.optimizer_offload and not reasoner.param_offload and reasoner.gpu_memory_utilization == 0.5
    assert reasoner.shape == QWEN3_8B
    # 32 tasks x both roles at once / 2 policies / 4 replicas = 8 groups of K = 8 per replica, prompts shared
    assert plan.policies[0].kv.needed == (64 * 4096 + 8 * 4096) * 36 * 2 * 8 * 128 * 2
    # a policy's GPUs are its GPUs per node on each of its nodes
    two_nodes = copy.deepcopy(math_8b_per_role)
    OmegaConf.update(two_nodes, "trainer.nnodes", 2)
    OmegaConf.update(two_nodes, "mas.policies", {"tool": {"nnodes": 1}}, force_add=True)
    assert [p.settings.gpus for p in plan_memory(two_nodes, 80).policies] == [8, 4]
    # verl's own defaults for a command typed by hand: TP 2 and half of each GPU for vLLM
    by_hand = doctor.composed(None, "gpu", ("mas.env=sudoku", "actor_rollout_ref.model.path=Qwen/Qwen3-1.7B"))
    shared = plan_memory(by_hand, 80).policies[0]
    assert (shared.settings.tp, shared.settings.gpu_memory_utilization, shared.kv.replicas) == (2, 0.5, 4)


def test_fixed_micro_batches_plan_every_sample_at_the_length_caps(math_8b_per_role):
    fixed = copy.deepcopy(math_8b_per_role)
    OmegaConf.update(fixed, "actor_rollout_ref.actor.use_dynamic_bsz", False)
    with pytest.raises(ValueError, match=r"^actor_rollout_ref\.actor\.ppo_micro_batch_size_per_gpu: needed"):
        plan_memory(fixed, 80)
    OmegaConf.update(fixed, "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", 2)
    reasoner = plan_memory(fixed, 80).policies[0]
    assert reasoner.micro_batch_tokens == 2 * (4096 + 4096)  # padded or packed: both samples may be at the caps
    assert parts(reasoner.update)["logits"] == 2 * 8192 * 151936 * 4


def test_the_attention_path_is_chosen_at_start_where_the_defaults_leave_it(math_8b_per_role):
    for installed, path, implementation in ((True, "packed", "flash_attention_2"), (False, "padded", "sdpa")):
        fresh = copy.deepcopy(math_8b_per_role)
        OmegaConf.update(fresh, "actor_rollout_ref.model.use_remove_padding", None)
        OmegaConf.update(fresh, "actor_rollout_ref.model.override_config.attn_implementation", None)
        assert fill_attention(fresh, flash_attn_installed=installed) == path
        model = fresh.actor_rollout_ref.model
        assert model.override_config.attn_implementation == implementation
        assert model.use_remove_padding is (path == "packed")
        check_attention(fresh, flash_attn_installed=installed)
        assert plan_memory(fresh, 80).policies[0].attention.startswith(f"{path} ({implementation}")
    explicit = copy.deepcopy(math_8b_per_role)
    OmegaConf.update(explicit, "actor_rollout_ref.model.use_remove_padding", False)
    OmegaConf.update(explicit, "actor_rollout_ref.model.override_config.attn_implementation", "sdpa")
    assert fill_attention(explicit, flash_attn_installed=True) == "padded"  # an explicit choice is kept


def test_main_warns_on_a_gpu_platform_only(math_8b_per_role):
    lines: list[str] = []
    warn_memory_plan(math_8b_per_role, lines.append, device_gib=40)
    assert lines and all(line.startswith("verl_mas.main: warning: memory plan (an estimate): ") for line in lines)
    assert any("reasoner: the update peaks at" in line for line in lines)
    on_cpu = copy.deepcopy(math_8b_per_role)
    OmegaConf.update(on_cpu, "trainer.device", "cpu")
    quiet: list[str] = []
    warn_memory_plan(on_cpu, quiet.append, device_gib=40)
    assert quiet == []
    unknown = copy.deepcopy(math_8b_per_role)
    OmegaConf.update(unknown, "actor_rollout_ref.model.path", "/nowhere/model")
    warn_memory_plan(unknown, quiet.append, device_gib=80)
    assert quiet == [
        "verl_mas.main: warning: memory not planned: actor_rollout_ref.model.path='/nowhere/model': no readable "
        "config.json there, and not one of ['Qwen/Qwen3-1.7B', 'Qwen/Qwen3-8B']; set actor_rollout_ref.model.path to "
        "a local model folder or one of those, as a hydra override on the command line (e.g. "
        "actor_rollout_ref.model.path=Qwen/Qwen3-8B)"
    ]


FACTS = doctor.Facts(
    python="3.11",
    versions={},
    requirements={"": [], "gpu": []},
    plugin={"registered": {"at_grpo": True, "cpu": True}, "errors": {}, "entry_point": ["verl_mas.plugin"]},
    cuda={"build": "12.8", "available": True, "devices": ["GPU"] * 8},
    sandbox={"layers": {}, "why_off": {}, "error": None, "ran": True},
)


def test_doctor_prints_the_plan_and_fails_when_a_peak_overflows():
    memory = doctor.MemoryRequest(gpu_memory=80, mean_sample_tokens=1024)
    padded = (*MATH_8B_PER_ROLE, "actor_rollout_ref.model.use_remove_padding=false", SDPA)
    text, status = doctor.report(FACTS, None, MATH, memory, padded)
    assert status == 1
    assert f"recipe {MATH} on gpu: ok\n  attention on GPUs here: padded (sdpa, use_remove_padding=false)" in text
    assert f"memory plan of recipe {MATH} with {' '.join(padded)}" in text
    assert "    attention: padded (sdpa, use_remove_padding=false)" in text
    assert "  - memory: reasoner: the update peaks at" in text  # a problem: exit 1
    flash = ("actor_rollout_ref.model.use_remove_padding=true", SDPA.replace("=sdpa", "=flash_attention_2"))
    assert (
        doctor.attention_path(MATH, flash) == "packed (flash_attention_2, use_remove_padding=true): no padding tokens"
    )
    assert "    reasoner: vLLM preempts" in text and "  - memory: reasoner: vLLM preempts" not in text  # not fatal


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--target", "cpu", "--gpu-memory", "80"], "--gpu-memory plans a GPU run"),
        (["--mean-sample-tokens", "512"], "--mean-sample-tokens is an assumption of the memory plan"),
        (["trainer.n_gpus_per_node=4"], "hydra overrides change a recipe or a memory plan"),
    ],
)
def test_doctor_refuses_memory_arguments_that_plan_nothing(argv, message, capsys):
    assert cli_main(["doctor", *argv]) == 2
    assert message in capsys.readouterr().err


def test_main_reads_the_first_gpus_memory_from_nvidia_smi(tmp_path, monkeypatch):
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 81559\necho 81559\n")  # MiB, one line per GPU
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert first_gpu_gib() == 81559 / 1024
    smi.write_text("#!/bin/sh\necho 'No devices were found'\nexit 6\n")
    assert first_gpu_gib() is None
    smi.unlink()
    assert first_gpu_gib() is None
