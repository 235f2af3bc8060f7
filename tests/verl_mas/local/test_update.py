"""PolicyTrainer: verl's PPO loss on hand-checkable batches, padding and micro-batch invariance, LoRA isolation."""

from __future__ import annotations

import copy
import dataclasses
import math

import pytest
import torch
from peft import LoraConfig, get_peft_model
from transformers import LlamaForCausalLM

from verl_mas.local.logprob import response_entropy, response_logits, scaled_log_softmax
from verl_mas.local.model import build_tiny_model
from verl_mas.local.update import PolicyTrainer, UpdateConfig, prompt_groups
from verl_mas.sample import Sample, VerlBatchTensors, samples_to_tensors

PAD = 0


def tiny_model(seed: int = 0) -> LlamaForCausalLM:
    return build_tiny_model(vocab_size=64, hidden=32, layers=2, heads=4, max_positions=128, seed=seed, intermediate=64)


def sample(prompt: list[int], response: list[int]) -> Sample:
    return Sample(
        task_uid="t",
        role="r",
        turn=0,
        branch=0,
        policy="p",
        prompt_ids=tuple(prompt),
        response_ids=tuple(response),
        logprobs=None,
        team_reward=0.0,
        local_reward=0.0,
        reward=0.0,
        continued=False,
    )


def batch(rows: list[tuple[list[int], list[int]]]) -> VerlBatchTensors:
    return samples_to_tensors([sample(p, r) for p, r in rows], pad_token_id=PAD)


def spread(tensors: VerlBatchTensors, per_sample: list[float]) -> torch.Tensor:
    """Advantages as the estimator lays them out: one value per sample over its response tokens."""
    return torch.tensor(per_sample).unsqueeze(-1) * tensors.response_mask


def with_old_logprobs(tensors: VerlBatchTensors, old: torch.Tensor) -> VerlBatchTensors:
    return dataclasses.replace(tensors, old_log_probs=old)


def response_sums(trainer: PolicyTrainer, tensors: VerlBatchTensors) -> torch.Tensor:
    return (trainer.compute_logprobs(tensors) * tensors.response_mask).sum(-1)


def step_gradients(
    trainer: PolicyTrainer, tensors: VerlBatchTensors, advantages: torch.Tensor
) -> tuple[dict[str, float], list[torch.Tensor]]:
    """Run `step` and capture each trainable parameter's accumulated gradient before clipping and the update."""
    captured: dict[int, torch.Tensor] = {}
    hooks = [
        p.register_post_accumulate_grad_hook(lambda p, i=i: captured.__setitem__(i, p.grad.detach().clone()))
        for i, p in enumerate(trainer.parameters)
    ]
    try:
        metrics = trainer.step(tensors, advantages)
    finally:
        for hook in hooks:
            hook.remove()
    return metrics, [captured[i] for i in range(len(trainer.parameters))]


ROWS = [([1, 2, 3], [4, 5]), ([7], [8, 9, 10]), ([3, 3, 3, 3], [11])]


def test_on_policy_first_step_loss_is_minus_mean_advantage() -> None:
    trainer = PolicyTrainer(tiny_model(), UpdateConfig(lr=1e-3))
    tensors = batch(ROWS)
    tensors = with_old_logprobs(tensors, trainer.compute_logprobs(tensors))
    metrics = trainer.step(tensors, spread(tensors, [1.0, -1.0, 0.5]))
    # ratio 1 everywhere: token-mean loss = -(2 * 1 + 3 * -1 + 1 * 0.5) / 6 tokens
    assert metrics["pg_loss"] == pytest.approx(0.5 / 6, abs=1e-6)
    assert metrics["clipfrac"] == 0.0
    assert metrics["approx_kl"] == pytest.approx(0.0, abs=1e-6)
    assert metrics["tokens"] == 6 and metrics["optimizer_steps"] == 1


def test_missing_old_logprobs_are_recomputed_on_policy() -> None:
    trainer = PolicyTrainer(tiny_model(), UpdateConfig(lr=1e-3))
    tensors = batch(ROWS)
    assert tensors.old_log_probs is None
    metrics = trainer.step(tensors, spread(tensors, [1.0, -1.0, 0.5]))
    assert metrics["pg_loss"] == pytest.approx(0.5 / 6, abs=1e-6)
    assert metrics["clipfrac"] == 0.0


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_step_raises_positive_and_lowers_negative_advantage_logprobs(seed: int) -> None:
    generator = torch.Generator().manual_seed(seed)
    prompt = torch.randint(1, 64, (4,), generator=generator).tolist()
    responses = [torch.randint(1, 64, (3,), generator=generator).tolist() for _ in range(2)]
    trainer = PolicyTrainer(tiny_model(seed), UpdateConfig(lr=1e-3))
    tensors = batch([(prompt, responses[0]), (prompt, responses[1])])
    before = response_sums(trainer, tensors)
    trainer.step(tensors, spread(tensors, [1.0, -1.0]))
    after = response_sums(trainer, tensors)
    assert after[0] > before[0]
    assert after[1] < before[1]


def ppo_token_loss(advantage: float, ratio: float, clip: float = 0.2, clip_c: float = 3.0) -> float:
    """PPO's clipped token loss, with the dual clip (bound -A * c) on negative advantages."""
    loss = max(-advantage * ratio, -advantage * min(max(ratio, 1 - clip), 1 + clip))
    return min(loss, -advantage * clip_c) if advantage < 0 else loss


@pytest.mark.parametrize(
    ("advantage", "ratio", "clipped", "dual_clipped"),
    [(1.0, 2.0, True, False), (-1.0, 0.5, True, False), (-1.0, 4.0, False, True), (1.0, 1.1, False, False)],
)
def test_clipped_loss_matches_formula_on_one_token(advantage: float, ratio: float, clipped: bool, dual_clipped: bool):
    trainer = PolicyTrainer(tiny_model(), UpdateConfig(lr=1e-3))
    tensors = batch([([5, 6], [7])])
    # old = current - log(ratio), so that exp(current - old) = ratio
    tensors = with_old_logprobs(tensors, trainer.compute_logprobs(tensors) - math.log(ratio))
    metrics = trainer.step(tensors, spread(tensors, [advantage]))
    assert metrics["pg_loss"] == pytest.approx(ppo_token_loss(advantage, ratio), abs=1e-5)
    assert metrics["clipfrac"] == (1.0 if clipped else 0.0)
    assert metrics["clipfrac_lower"] == (1.0 if dual_clipped else 0.0)
    assert metrics["approx_kl"] == pytest.approx(-math.log(ratio), abs=1e-5)


def widen(tensors: VerlBatchTensors, extra_prompt: int, extra_response: int) -> VerlBatchTensors:
    """The same samples with more left padding on prompts and more right padding on responses."""
    n = tensors.prompts.shape[0]
    prompts = torch.cat([torch.full((n, extra_prompt), PAD), tensors.prompts], dim=1)
    responses = torch.cat([tensors.responses, torch.full((n, extra_response), PAD)], dim=1)
    prompt_len = tensors.prompts.shape[1]
    prompt_mask = torch.cat([torch.zeros(n, extra_prompt, dtype=torch.long), tensors.attention_mask[:, :prompt_len]], 1)
    response_mask = torch.cat([tensors.response_mask, torch.zeros(n, extra_response)], dim=1)
    return dataclasses.replace(
        tensors,
        prompts=prompts,
        responses=responses,
        input_ids=torch.cat([prompts, responses], dim=1),
        attention_mask=torch.cat([prompt_mask, response_mask.long()], dim=1),
        response_mask=response_mask,
        token_level_rewards=torch.cat([tensors.token_level_rewards, torch.zeros(n, extra_response)], dim=1),
    )


def test_padding_width_changes_neither_loss_nor_gradients() -> None:
    model = tiny_model()
    narrow = batch(ROWS)
    wide = widen(narrow, extra_prompt=3, extra_response=4)
    advantages = [1.0, -1.0, 0.5]
    narrow_metrics, narrow_grads = step_gradients(
        PolicyTrainer(copy.deepcopy(model), UpdateConfig()), narrow, spread(narrow, advantages)
    )
    wide_metrics, wide_grads = step_gradients(
        PolicyTrainer(copy.deepcopy(model), UpdateConfig()), wide, spread(wide, advantages)
    )
    assert wide_metrics["pg_loss"] == pytest.approx(narrow_metrics["pg_loss"], abs=1e-6)
    for narrow_grad, wide_grad in zip(narrow_grads, wide_grads, strict=True):
        torch.testing.assert_close(wide_grad, narrow_grad, atol=1e-5, rtol=1e-4)


def test_logprobs_of_a_sample_do_not_depend_on_its_batch_mates() -> None:
    trainer = PolicyTrainer(tiny_model(), UpdateConfig())
    together = trainer.compute_logprobs(batch(ROWS))
    for i, row in enumerate(ROWS):
        alone = trainer.compute_logprobs(batch([row]))
        length = len(row[1])
        torch.testing.assert_close(together[i, :length], alone[0, :length], atol=1e-5, rtol=1e-5)


def test_micro_batch_accumulation_matches_full_batch_gradients() -> None:
    model = tiny_model()
    tensors = batch(ROWS + [([9, 8], [7, 6, 5, 4])])
    advantages = spread(tensors, [1.0, -1.0, 0.5, -0.5])
    full_metrics, full_grads = step_gradients(PolicyTrainer(copy.deepcopy(model), UpdateConfig()), tensors, advantages)
    micro_trainer = PolicyTrainer(copy.deepcopy(model), UpdateConfig(micro_batch_size=1))
    micro_metrics, micro_grads = step_gradients(micro_trainer, tensors, advantages)
    assert micro_metrics["pg_loss"] == pytest.approx(full_metrics["pg_loss"], abs=1e-6)
    for full_grad, micro_grad in zip(full_grads, micro_grads, strict=True):
        torch.testing.assert_close(micro_grad, full_grad, atol=1e-5, rtol=0)


def test_mini_batches_take_one_optimizer_step_each_per_epoch() -> None:
    trainer = PolicyTrainer(tiny_model(), UpdateConfig(mini_batch_size=2, micro_batch_size=1, ppo_epochs=2))
    tensors = batch(ROWS)
    metrics = trainer.step(tensors, spread(tensors, [1.0, -1.0, 0.5]))
    assert metrics["optimizer_steps"] == 4  # 2 epochs x ceil(3 / 2) mini-batches
    assert metrics["tokens"] == 12  # each epoch sees all 6 response tokens


@pytest.mark.parametrize("micro_batch_size", [None, 1])
def test_kl_loss_uses_given_reference_logprobs(micro_batch_size: int | None) -> None:
    config = UpdateConfig(use_kl_loss=True, kl_coef=0.1, kl_type="low_var_kl", micro_batch_size=micro_batch_size)
    trainer = PolicyTrainer(tiny_model(), config)
    tensors = batch(ROWS)
    reference = trainer.compute_logprobs(tensors)
    # k3 estimator with ref = current - 1 on every token: exp(-1) - (-1) - 1
    metrics = trainer.step(tensors, spread(tensors, [1.0, -1.0, 0.5]), ref_logprobs=reference - 1.0)
    assert metrics["kl_loss"] == pytest.approx(math.exp(-1.0), abs=1e-5)


def k3_token_mean(logprobs: torch.Tensor, reference: torch.Tensor, mask: torch.Tensor) -> float:
    """verl's low_var_kl by hand: exp(ref - logp) - (ref - logp) - 1, averaged over response tokens."""
    gap = reference - logprobs
    return float(((gap.exp() - gap - 1) * mask).sum() / mask.sum())


@pytest.mark.parametrize("with_lora", [False, True])
def test_kl_loss_measures_the_distance_to_the_model_the_trainer_started_from(with_lora: bool) -> None:
    model = lora_two_adapters() if with_lora else tiny_model()
    config = UpdateConfig(lr=1e-2, use_kl_loss=True, kl_coef=0.1)
    trainer = PolicyTrainer(model, config, "coder" if with_lora else None)
    tensors = batch(ROWS)
    advantages = spread(tensors, [1.0, -1.0, 0.5])
    started = trainer.compute_logprobs(tensors)
    first = trainer.step(tensors, advantages)
    assert first["kl_loss"] == pytest.approx(0.0, abs=1e-7)  # the first update starts at the reference
    for _ in range(2):  # with LoRA, lora_B starts at zero: the second step is the first to move the output
        moved = trainer.compute_logprobs(tensors)
        metrics = trainer.step(tensors, advantages)
    assert not torch.allclose(moved, started)
    torch.testing.assert_close(trainer.reference_logprobs(tensors), started, atol=0, rtol=0)
    assert metrics["kl_loss"] == pytest.approx(k3_token_mean(moved, started, tensors.response_mask), rel=1e-4)
    assert metrics["kl_loss"] > 1e-6
    if not with_lora:
        assert not any(p.requires_grad for p in trainer.reference.parameters())


def test_the_reference_travels_with_the_trainer_state_and_a_state_without_one_is_refused() -> None:
    config = UpdateConfig(lr=1e-2, use_kl_loss=True)
    trainer = PolicyTrainer(tiny_model(seed=0), config)
    tensors = batch(ROWS)
    trainer.step(tensors, spread(tensors, [1.0, -1.0, 0.5]))
    resumed = PolicyTrainer(tiny_model(seed=1), config)  # built from other weights, as a resumed run is
    resumed.load_state_dict(trainer.state_dict())
    torch.testing.assert_close(resumed.reference_logprobs(tensors), trainer.reference_logprobs(tensors), atol=0, rtol=0)
    without_kl = PolicyTrainer(tiny_model(), UpdateConfig())
    assert "reference" not in without_kl.state_dict()
    with pytest.raises(ValueError, match="use_kl_loss=true, but the checkpoint holds no reference model"):
        resumed.load_state_dict(without_kl.state_dict())
    with pytest.raises(ValueError, match="keeps no reference model"):
        without_kl.reference_logprobs(tensors)


@pytest.mark.parametrize("micro_batch_size", [None, 1])
def test_entropy_bonus_adds_minus_coeff_times_the_token_mean_entropy_gradient(micro_batch_size: int | None) -> None:
    coeff = 0.05
    config = UpdateConfig(lr=1e-3, entropy_coeff=coeff, grad_clip=None, micro_batch_size=micro_batch_size)
    trainer = PolicyTrainer(tiny_model(), config)
    tensors = batch(ROWS)
    # Zero advantages: the clipped loss has no gradient, so the step's gradient is the entropy term's alone.
    metrics, gradients = step_gradients(trainer, tensors, torch.zeros(tensors.response_mask.shape))

    reference = tiny_model()
    response_length = tensors.responses.shape[1]
    logits = response_logits(reference, tensors.input_ids, tensors.attention_mask, response_length)
    entropy = response_entropy(scaled_log_softmax(logits, 1.0), tensors.attention_mask, response_length)
    token_mean = entropy.sum() / tensors.response_mask.sum()
    (-coeff * token_mean).backward()
    expected = [p.grad for p in reference.parameters()]
    assert metrics["entropy"] == pytest.approx(token_mean.item(), rel=1e-5)
    for got, want in zip(gradients, expected, strict=True):
        torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-4)
    assert any(g.abs().sum() > 0 for g in gradients)


def test_entropy_bonus_raises_entropy_and_zero_coefficient_moves_nothing() -> None:
    tensors = batch(ROWS)
    zeros = torch.zeros(tensors.response_mask.shape)
    still = PolicyTrainer(tiny_model(), UpdateConfig(lr=1e-2, weight_decay=0.0))  # decay alone would move them
    before = [p.detach().clone() for p in still.parameters]
    still.step(tensors, zeros)
    assert all(torch.equal(a, b) for a, b in zip(before, still.parameters, strict=True))
    assert "entropy" not in still.step(tensors, zeros)

    bonus = PolicyTrainer(tiny_model(), UpdateConfig(lr=1e-2, weight_decay=0.0, entropy_coeff=1.0))
    first = bonus.step(tensors, zeros)["entropy"]
    for _ in range(5):
        last = bonus.step(tensors, zeros)["entropy"]
    assert last > first


@pytest.mark.parametrize("value", [-0.1, float("nan"), float("inf")])
def test_entropy_coeff_must_be_finite_and_non_negative(value: float) -> None:
    with pytest.raises(ValueError, match="entropy_coeff"):
        UpdateConfig(entropy_coeff=value)


def lora_two_adapters():
    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.0)
    model = get_peft_model(tiny_model(), lora, adapter_name="coder")
    model.add_adapter("tester", lora)
    return model


def test_lora_trainer_changes_only_its_own_adapter() -> None:
    model = lora_two_adapters()
    coder_trainer = PolicyTrainer(model, UpdateConfig(lr=1e-2), adapter_name="coder")
    tester_trainer = PolicyTrainer(model, UpdateConfig(lr=1e-2), adapter_name="tester")
    coder_params = {name for name, p in model.named_parameters() if "lora_" in name and ".coder." in name}
    trainable_by_coder = {name for name, p in model.named_parameters() if any(p is q for q in coder_trainer.parameters)}
    assert trainable_by_coder == coder_params
    tensors = batch(ROWS)
    tester_logprobs_before = tester_trainer.compute_logprobs(tensors)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    for _ in range(2):  # the second step moves lora_A too (lora_B starts at zero)
        coder_trainer.step(tensors, spread(tensors, [1.0, -1.0, 0.5]))
    after = {name: p.detach().clone() for name, p in model.named_parameters()}
    assert {name for name in before if not torch.equal(before[name], after[name])} == coder_params
    # the tester adapter still routes through its untouched weights
    torch.testing.assert_close(tester_trainer.compute_logprobs(tensors), tester_logprobs_before, atol=0, rtol=0)
    tester_trainer.step(tensors, spread(tensors, [1.0, -1.0, 0.5]))
    changed_by_tester = {name for name, p in model.named_parameters() if not torch.equal(p, after[name])}
    assert changed_by_tester and all(".tester." in name for name in changed_by_tester)


# A tree node's branches: the same prompt with different responses, next to a prompt of its own.
BRANCH_ROWS = [([1, 2, 3], [4, 5]), ([1, 2, 3], [6]), ([1, 2, 3], [7, 8, 9]), ([3, 3, 3, 3], [11])]


@pytest.mark.parametrize("with_lora", [False, True])
def test_shared_prompts_leave_the_update_unchanged(with_lora: bool) -> None:
    model = lora_two_adapters() if with_lora else tiny_model()
    adapter = "coder" if with_lora else None
    tensors = batch(BRANCH_ROWS)
    advantages = spread(tensors, [1.0, -0.5, 0.25, -1.0])
    results = {}
    for share in (False, True):
        trainer = PolicyTrainer(copy.deepcopy(model), UpdateConfig(lr=1e-2, share_prompts=share), adapter)
        for _ in range(2):  # the second step moves lora_A too (lora_B starts at zero)
            metrics, grads = step_gradients(trainer, tensors, advantages)
        results[share] = (metrics, grads, [p.detach() for p in trainer.parameters])
    assert results[True][0]["pg_loss"] == pytest.approx(results[False][0]["pg_loss"], abs=1e-6)
    for shared, per_row in zip(results[True][1] + results[True][2], results[False][1] + results[False][2], strict=True):
        torch.testing.assert_close(shared, per_row, atol=1e-5, rtol=1e-4)


def test_prompt_groups_by_hand() -> None:
    groups = prompt_groups(batch(BRANCH_ROWS + [([1, 2, 3], [5])]))
    assert [g.tolist() for g in groups] == [[0, 1, 2, 4], [3]]
    # Distinct prompts: one group each, in row order.
    assert [g.tolist() for g in prompt_groups(batch(ROWS))] == [[0], [1], [2]]


def test_mini_batches_hold_whole_prompt_groups(monkeypatch) -> None:
    rows = [([1, 2], [3]), ([4], [5]), ([1, 2], [6]), ([7, 8, 9], [3]), ([4], [9]), ([7, 8, 9], [4])]
    tensors = batch(rows)
    seen: list[list[int]] = []
    original = PolicyTrainer._update_mini_batch
    monkeypatch.setattr(
        PolicyTrainer,
        "_update_mini_batch",
        lambda self, t, columns, mini_rows, tally: (
            seen.append(sorted(mini_rows.tolist())) or original(self, t, columns, mini_rows, tally)
        ),
    )
    trainer = PolicyTrainer(tiny_model(), UpdateConfig(mini_batch_size=2, ppo_epochs=3))
    trainer.step(tensors, spread(tensors, [1.0, -1.0, -1.0, 0.5, 1.0, -0.5]))
    assert len(seen) == 9 and all(mini in ([0, 2], [1, 4], [3, 5]) for mini in seen)
    assert len({tuple(map(tuple, seen[i : i + 3])) for i in (0, 3, 6)}) > 1  # the group order is shuffled per epoch


@pytest.mark.parametrize("micro_batch_size", [None, 2])
def test_gradient_is_what_the_step_accumulates_before_its_optimizer_step(micro_batch_size: int | None) -> None:
    model = tiny_model()
    tensors = batch(ROWS + [([9, 8], [7, 6, 5, 4])])
    advantages = spread(tensors, [1.0, -1.0, 0.5, -0.5])
    config = UpdateConfig(lr=1e-2, micro_batch_size=micro_batch_size)
    measured = PolicyTrainer(copy.deepcopy(model), config)
    before = [p.detach().clone() for p in measured.parameters]
    flat = measured.gradient(tensors, advantages)
    _, step_grads = step_gradients(PolicyTrainer(copy.deepcopy(model), config), tensors, advantages)
    torch.testing.assert_close(flat, torch.cat([g.flatten() for g in step_grads]), atol=1e-6, rtol=1e-5)
    # nothing moved, nothing left behind: the trainer still steps as a fresh one would
    assert all(torch.equal(a, b) for a, b in zip(before, measured.parameters, strict=True))
    assert all(p.grad is None for p in measured.parameters) and measured.optimizer_steps == 0


def test_gradient_on_policy_is_minus_advantage_weighted_logprob_gradient_over_tokens() -> None:
    trainer = PolicyTrainer(tiny_model(), UpdateConfig())
    tensors = batch(ROWS)
    per_sample = [1.0, -1.0, 0.5]
    flat = trainer.gradient(tensors, spread(tensors, per_sample))

    # on-policy the ratio is 1 and no clip binds: d loss = -(1 / tokens) sum_i A_i d sum_t log p_it
    reference = tiny_model()
    response_length = tensors.responses.shape[1]
    logits = response_logits(reference, tensors.input_ids, tensors.attention_mask, response_length)
    log_probs = scaled_log_softmax(logits, 1.0).gather(-1, tensors.responses.unsqueeze(-1)).squeeze(-1)
    sums = (log_probs * tensors.response_mask).sum(-1)
    (-(torch.tensor(per_sample) * sums).sum() / 6).backward()
    expected = torch.cat([p.grad.flatten() for p in reference.parameters()])
    torch.testing.assert_close(flat, expected, atol=1e-6, rtol=1e-4)
    assert flat.abs().sum() > 0
    # linear in the advantages: their negation negates it, zeros give zeros
    torch.testing.assert_close(trainer.gradient(tensors, -spread(tensors, per_sample)), -flat)
    assert not trainer.gradient(tensors, torch.zeros(tensors.response_mask.shape)).any()


def test_gradient_refuses_advantages_of_another_shape() -> None:
    tensors = batch(ROWS)
    with pytest.raises(ValueError, match="advantages shape"):
        PolicyTrainer(tiny_model(), UpdateConfig()).gradient(tensors, torch.zeros(3, 1))
