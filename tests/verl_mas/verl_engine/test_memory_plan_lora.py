"""The memory plan of LoRA runs against hand-computed cases: a frozen base without gradients or moments, adapters with
both, activations through every layer; one LoRA policy per role and one base with an adapter per role
(`mas.lora_per_role`) read from the composed config; the adapter counts and docs/gpu.md's table of both layouts."""

from __future__ import annotations

from pathlib import Path

import pytest

from verl_mas import doctor
from verl_mas.verl_engine.memory_plan import plan_memory, plan_warnings
from verl_mas.verl_engine.model_shape import GIB, KNOWN_SHAPES, Lora, LoraLayout, ModelShape, lora_layout

REPO = Path(__file__).resolve().parents[3]
QWEN3_1_7B = KNOWN_SHAPES["Qwen/Qwen3-1.7B"]
QWEN3_8B = KNOWN_SHAPES["Qwen/Qwen3-8B"]
TINY = ModelShape(hidden=4, layers=1, heads=2, kv_heads=1, head_dim=2, intermediate=8, vocab=10, tied=True)
# Qwen3-1.7B by hand: all parameters, one decoder layer, the tied root unit; a rank-16 adapter per layer and in all
P, LAYER, ROOT = 1_720_574_976, 50_336_000, 151936 * 2048 + 2048
A_LAYER = 16 * (4096 + 3072 + 3072 + 4096 + 8192 + 8192 + 8192)  # rank x (inputs + outputs), q k v o gate up down
A = 28 * A_LAYER
# plan_path with a policy per role on 8 GPUs (4 each), vLLM TP 1, packed micro-batches of 16384 tokens
PER_ROLE = (
    "mas.env=plan_path",
    "mas.router=per_role",
    "actor_rollout_ref.model.path=Qwen/Qwen3-1.7B",
    "trainer.n_gpus_per_node=8",
    "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
    "actor_rollout_ref.model.use_remove_padding=true",
)
L3 = ("+mas.policies.tool.lora_rank=16", "+mas.policies.plan.lora_rank=16")  # one LoRA policy per role
L2 = ("mas.lora_per_role=true", "actor_rollout_ref.model.lora_rank=16")  # one base, one adapter per role


def plan(*overrides: str, gpu_gib: float = 80):
    return plan_memory(doctor.composed(None, "gpu", (*PER_ROLE, *overrides)), gpu_gib)


def parts(peak) -> dict[str, float]:
    return dict(peak.parts)


def test_lora_adapters_count_rank_times_inputs_plus_outputs_of_every_linear_layer():
    assert TINY.params == 16 + 16 + 16 + 4 + 96 + 8 + 10 * 4 + 4 == 200  # q, k+v, o, q/k norms, MLP, norms; root
    # q 4->4, k 4->2, v 4->2, o 4->4, gate 4->8, up 4->8, down 8->4: 8 + 6 + 6 + 8 + 12 + 12 + 12 at rank 1
    assert Lora(rank=1).params(TINY) == 64 and Lora(rank=2).params(TINY) == 128
    assert Lora(rank=16).params(QWEN3_1_7B) == A == 17_432_576
    assert Lora(rank=1, targets=("q_proj", "down_proj")).params(TINY) == 8 + 12


def test_one_base_holds_the_base_once_and_one_policy_per_role_once_per_role():
    # rank 2, 3 roles: an adapter is 128 parameters, trained at 4 + 4 + 8 = 16 bytes each (2048 bytes)
    assert lora_layout(TINY, 2, 3, one_base=True) == LoraLayout(200 * 4 + 3 * 2048, (200 + 4 * 128) * 2)
    assert lora_layout(TINY, 2, 3, one_base=False) == LoraLayout(3 * (200 * 4 + 2048), 3 * (200 + 128) * 2)
    assert lora_layout(TINY, 2, 3, one_base=True, model_bytes=2) == LoraLayout(200 * 2 + 3 * 128 * 12, 1424)
    assert lora_layout(TINY, 2, 1, one_base=True).workers == lora_layout(TINY, 2, 1, one_base=False).workers


def test_a_lora_policy_holds_a_frozen_base_and_trains_only_its_adapter():
    full, lora = plan().policies[0], plan(*L3).policies[0]
    assert full.settings.lora is None and lora.settings.lora == Lora(16, adapters=1, server_slots=1)
    update = parts(lora.update)
    assert update["params"] == (P + A) * 4 / 4  # the fp32 base and adapter over the policy's 4 GPUs
    assert update["grads"] == A * 4 / 4 and update["optimizer"] == A * 8 / 4  # the adapter's alone
    # the root unit and two layers with their adapters in bf16, and one layer's adapter gradient in fp32
    assert update["gathered units"] == (ROOT + 2 * (LAYER + A_LAYER)) * 2 + A_LAYER * 4
    assert parts(full.update)["gathered units"] == (ROOT + 2 * LAYER) * 2 + ROOT * 4  # the root's fp32 gradient
    # the backward still runs through every layer: activations and logits as in full training
    for name in ("activations", "logits"):
        assert update[name] == parts(full.update)[name]
    saved = full.update.total - lora.update.total
    assert saved == pytest.approx(3 * P - 4 * A + 4 * ROOT - 8 * A_LAYER, rel=1e-12)  # 5.9 GiB of the full 21.9
    assert parts(lora.rollout)["optimizer"] == A * 8 / 4 and parts(lora.rollout)["actor params"] == P + A
    # vLLM holds the base and one bf16 adapter slot: the KV cache gets the rest
    assert full.kv.budget - lora.kv.budget == pytest.approx(A * 2)


def test_the_policys_rank_replaces_the_models_and_a_policy_without_one_takes_the_models():
    tool, plan_policy = plan("actor_rollout_ref.model.lora_rank=8", "+mas.policies.tool.lora_rank=16").policies
    assert (tool.settings.lora.rank, plan_policy.settings.lora.rank) == (16, 8)


def test_one_base_with_an_adapter_per_role_is_one_group_on_every_gpu():
    (group,) = plan(*L2).policies
    s = group.settings
    assert (s.policy, s.roles, s.gpus) == ("adapters", ("tool", "plan"), 8)
    assert s.lora == Lora(16, adapters=2, server_slots=3)  # vLLM also holds verl's own synced adapter
    update = parts(group.update)
    assert update["params"] == (P + 2 * A) * 4 / 8
    assert update["grads"] == 2 * A * 4 / 8 and update["optimizer"] == 2 * A * 8 / 8
    assert update["gathered units"] == (ROOT + 2 * (LAYER + 2 * A_LAYER)) * 2 + 2 * A_LAYER * 4
    assert plan().policies[0].kv.budget - group.kv.budget == pytest.approx(3 * A * 2)
    # more GPUs for the group come from the node's count, not from a policy's (it has none of its own)
    (update_too_big,) = [w for w in plan_warnings(group, 10 * GIB) if w.what.startswith("the update")]
    assert "trainer.n_gpus_per_node or trainer.nnodes (more GPUs)" in update_too_big.keys
    assert plan(*L3).policies[0].settings.gpus_key == "mas.policies.tool.n_gpus_per_node"


@pytest.mark.parametrize("roles_layout, one_base", [(L3, False), (L2, True)])
def test_the_plan_sums_to_the_lora_table_of_docs_gpu_md(roles_layout, one_base):
    """Summed over its GPUs, the planned actor state is lora_layout's workers column; a replica's weights (the
    difference its KV budget shows against a base without adapters, at TP 1) is one server's share of the column."""
    plans = plan(*roles_layout).policies
    workers = sum(sum(parts(p.update)[k] for k in ("params", "grads", "optimizer")) * p.settings.gpus for p in plans)
    expected = lora_layout(QWEN3_1_7B, 16, 2, one_base=one_base)
    assert workers == pytest.approx(expected.workers, rel=1e-12)
    base_budget = plan().policies[0].kv.budget
    servers = sum(P * 2 + (base_budget - p.kv.budget) for p in plans)
    assert servers == pytest.approx(expected.servers, rel=1e-9)


def test_target_modules_the_plan_cannot_size_are_named():
    narrow = plan(*L3, "actor_rollout_ref.model.target_modules=[q_proj,v_proj]").policies[0].settings.lora
    assert narrow.targets == ("q_proj", "v_proj") and narrow.params(QWEN3_1_7B) == 28 * 16 * (4096 + 3072)
    with pytest.raises(ValueError, match=r"^actor_rollout_ref\.model\.target_modules: the memory plan sizes "):
        plan(*L3, "actor_rollout_ref.model.target_modules=[q_proj,lm_head]")
    # without LoRA the key is not read
    assert plan("actor_rollout_ref.model.target_modules=[lm_head]").policies[0].settings.lora is None


def lora_layout_rows(rank: int = 16) -> list[str]:
    """docs/gpu.md's rows: per model and roles count, the workers' and servers' GiB under both layouts."""
    rows = []
    for name, shape in (("Qwen3-1.7B", QWEN3_1_7B), ("Qwen3-8B", QWEN3_8B)):
        for roles in (2, 3):
            l2, l3 = (lora_layout(shape, rank, roles, one_base) for one_base in (True, False))
            cells = [f"{name}, {roles} roles"]
            for part in ("workers", "servers"):
                a, b = getattr(l2, part), getattr(l3, part)
                cells += [f"{a / GIB:.1f}", f"{b / GIB:.1f}", f"{a / b:.2f}"]
            rows.append(f"| {' | '.join(cells)} |")
    return rows


def test_docs_gpu_md_quotes_the_lora_layouts_as_computed():
    doc = (REPO / "docs" / "gpu.md").read_text()
    missing = [row for row in lora_layout_rows() if row not in doc]
    assert not missing, f"docs/gpu.md lacks the rows {missing}"
