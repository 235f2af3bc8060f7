"""The PPO policy update of the local engine: verl's clipped policy loss on one policy's samples, with AdamW."""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Any

import torch
from verl.trainer.ppo.core_algos import agg_loss, get_policy_loss_fn, kl_penalty
from verl.workers.config import ActorConfig, PolicyLossConfig

from verl_mas.local.logprob import (
    distinct_prompts,
    picked_logprobs,
    response_entropy,
    response_logits,
    scaled_log_softmax,
)
from verl_mas.sample import VerlBatchTensors


@dataclass
class UpdateConfig:
    """Optimizer and PPO-loss settings of one policy (defaults: AT-GRPO's clip 0.2, no KL, token-mean, 1 epoch)."""

    lr: float = 1e-6
    weight_decay: float = 0.01
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    grad_clip: float | None = 1.0  # max global grad norm; None: measure the norm, clip nothing
    clip_ratio: float = 0.2
    clip_ratio_low: float | None = None  # None: clip_ratio
    clip_ratio_high: float | None = None  # None: clip_ratio
    clip_ratio_c: float = 3.0  # dual-clip bound for negative advantages
    loss_agg_mode: str = "token-mean"
    policy_loss_mode: str = "vanilla"  # a name in verl's policy-loss registry
    ppo_epochs: int = 1
    mini_batch_size: int | None = None  # samples per optimizer step; None: the whole batch
    micro_batch_size: int | None = None  # samples per forward/backward; None: the whole mini-batch
    use_kl_loss: bool = False
    kl_coef: float = 0.001
    kl_type: str = "low_var_kl"
    # > 0: subtract this times the aggregated entropy of the sampled distribution from the loss (verl's
    # actor.entropy_coeff), against the collapse of exploration that leaves every branch of a group alike.
    entropy_coeff: float = 0.0
    temperature: float = 1.0  # the sampler's temperature: log-probs are of softmax(logits / temperature)
    shuffle_seed: int = 0
    # Rows with the same prompt (a tree node's K branches) run it once and share its keys and values (same values
    # and gradients). False: one full pass per row, for a model whose cache cannot be gathered along the batch.
    share_prompts: bool = True

    def __post_init__(self) -> None:
        if self.ppo_epochs < 1:
            raise ValueError(f"update.ppo_epochs must be >= 1, got {self.ppo_epochs}")
        for name in ("mini_batch_size", "micro_batch_size"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"update.{name} must be >= 1 or None, got {value}")
        if self.temperature <= 0:
            raise ValueError(f"update.temperature must be > 0, got {self.temperature}")
        if not 0.0 <= self.entropy_coeff < math.inf:
            raise ValueError(f"update.entropy_coeff must be a finite number >= 0, got {self.entropy_coeff}")

    def actor_config(self) -> ActorConfig:
        """The verl ActorConfig its policy-loss functions read (clip ratios, loss_agg_mode, global_batch_info).

        Batching is PolicyTrainer's own; ActorConfig insists on a micro-batch size, which no loss function reads.
        """
        return ActorConfig(
            strategy="local",
            rollout_n=1,
            ppo_micro_batch_size_per_gpu=1,
            use_torch_compile=False,
            clip_ratio=self.clip_ratio,
            clip_ratio_low=self.clip_ratio_low,
            clip_ratio_high=self.clip_ratio_high,
            clip_ratio_c=self.clip_ratio_c,
            loss_agg_mode=self.loss_agg_mode,
            policy_loss=PolicyLossConfig(loss_mode=self.policy_loss_mode),
            ppo_epochs=self.ppo_epochs,
            use_kl_loss=self.use_kl_loss,
            kl_loss_coef=self.kl_coef,
            kl_loss_type=self.kl_type,
        )


class PolicyTrainer:
    """Trains one policy: a whole model, or one LoRA adapter (`adapter_name`) of a peft model shared by policies.

    With an adapter, every forward first activates it (peft's `set_adapter` also makes it the only trainable
    adapter), and the optimizer holds that adapter's parameters only.

    With `use_kl_loss`, the reference policy is the model as the trainer receives it (the run's starting model, as
    verl's reference worker loads `model.path`): for a whole model a frozen copy, which `state_dict` carries so that
    a resumed run keeps it; for an adapter the base model with every adapter off (peft keeps the base frozen).
    """

    def __init__(self, model: torch.nn.Module, config: UpdateConfig, adapter_name: str | None = None) -> None:
        self.model = model
        self.config = config
        self.adapter_name = adapter_name
        self.activate()
        self.parameters = [p for p in model.parameters() if p.requires_grad]
        if not self.parameters:
            raise ValueError(f"PolicyTrainer({adapter_name!r}): the model has no trainable parameters")
        self.optimizer = torch.optim.AdamW(
            self.parameters, lr=config.lr, betas=config.betas, eps=config.eps, weight_decay=config.weight_decay
        )
        self.generator = torch.Generator().manual_seed(config.shuffle_seed)
        self.actor_config = config.actor_config()
        self.policy_loss_fn = get_policy_loss_fn(config.policy_loss_mode)
        self.optimizer_steps = 0
        self.reference = frozen_copy(model) if config.use_kl_loss and adapter_name is None else None

    def activate(self) -> None:
        """Route the shared model's forward through this policy's adapter (a no-op for a whole model)."""
        if self.adapter_name is not None:
            self.model.set_adapter(self.adapter_name)

    def compute_logprobs(self, tensors: VerlBatchTensors) -> torch.Tensor:
        """[N, R] log-probs of the responses under the current policy, on CPU, micro-batched like training."""
        self.activate()
        return self._no_grad_logprobs(self.model, tensors)

    def reference_logprobs(self, tensors: VerlBatchTensors) -> torch.Tensor:
        """[N, R] log-probs of the responses under the reference policy (see the class), on CPU."""
        if self.adapter_name is not None:
            self.activate()
            with self.model.disable_adapter():
                return self._no_grad_logprobs(self.model, tensors)
        if self.reference is None:
            raise ValueError("this trainer keeps no reference model: build it with update.use_kl_loss=true")
        return self._no_grad_logprobs(self.reference, tensors)

    @torch.no_grad()
    def _no_grad_logprobs(self, model: torch.nn.Module, tensors: VerlBatchTensors) -> torch.Tensor:
        n = tensors.input_ids.shape[0]
        micro = self.config.micro_batch_size or self.config.mini_batch_size or n
        out = torch.zeros(tensors.response_mask.shape, dtype=torch.float32)
        for start in range(0, n, micro):
            rows = torch.arange(start, min(start + micro, n))
            batch = _slice_rows(tensors, rows, self._device())
            out[rows, : batch.response_length] = self._forward(batch, model=model)[0].cpu()
        return out

    def step(
        self, tensors: VerlBatchTensors, advantages: torch.Tensor, ref_logprobs: torch.Tensor | None = None
    ) -> dict[str, float]:
        """One policy update on this policy's samples: `ppo_epochs` passes over shuffled mini-batches.

        The shuffle moves whole prompt groups (rows with the same prompt: a tree node's K branches), so a group's
        rows stay together in one mini-batch (or two, at a boundary): they keep sharing their prompt's forward
        pass, and each mini-batch carries whole groups, whose advantages balance each other.

        Args:
            tensors: the samples; `old_log_probs` None means "recompute them now, before any update" (on-policy).
            advantages: [N, R], zero outside the response mask.
            ref_logprobs: [N, R] reference-policy log-probs for `use_kl_loss`; None: the trainer's own reference.

        Returns:
            Token-weighted means of verl's pg metrics (clipfrac, clipfrac_lower, approx_kl = ppo_kl), the mean over
            optimizer steps of pg_loss and grad_norm, neg_logprob (mean -log p of the response tokens: an entropy
            estimate when on-policy), kl_loss when used, entropy (token mean, with entropy_coeff > 0), lr, tokens,
            skipped_steps (non-finite gradients) and optimizer_steps (the trainer's running total). Loss metrics are
            absent when no sample has a response token.
        """
        n = tensors.response_mask.shape[0]
        columns = self._loss_columns(tensors, advantages, ref_logprobs)
        mini = self.config.mini_batch_size or n
        tally = _MetricTally()
        groups = prompt_groups(tensors)
        for _ in range(self.config.ppo_epochs):
            order = torch.cat([groups[g] for g in torch.randperm(len(groups), generator=self.generator).tolist()])
            for start in range(0, n, mini):
                self._update_mini_batch(tensors, columns, order[start : start + mini], tally)
        return tally.summary(lr=self.optimizer.param_groups[0]["lr"], optimizer_steps=self.optimizer_steps)

    def gradient(
        self, tensors: VerlBatchTensors, advantages: torch.Tensor, ref_logprobs: torch.Tensor | None = None
    ) -> torch.Tensor:
        """The flattened gradient of this policy's loss on all of `tensors` as one mini-batch, at the current
        weights: what `step` accumulates before clipping and its optimizer step, with mini_batch_size None and the
        first epoch. Nothing is updated, and no gradient is left on the parameters.

        Args: as `step`'s. Returns: [P] float32 on CPU, the trainable parameters' gradients in their order (zeros
        where the loss does not reach a parameter, and everywhere when no sample has a response token).
        """
        columns = self._loss_columns(tensors, advantages, ref_logprobs)
        rows = torch.arange(tensors.response_mask.shape[0])
        if tensors.response_mask.sum() > 0:
            self._backward(tensors, columns, rows, _MetricTally())
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in self.parameters]
        flat = torch.cat([g.detach().flatten().float().cpu() for g in grads])
        self.optimizer.zero_grad(set_to_none=True)
        return flat

    def _loss_columns(
        self, tensors: VerlBatchTensors, advantages: torch.Tensor, ref_logprobs: torch.Tensor | None
    ) -> dict[str, torch.Tensor]:
        """The per-token columns the loss reads: old log-probs (recomputed when absent), advantages, and the
        reference log-probs with `use_kl_loss`; leaves this policy active."""
        n, r = tensors.response_mask.shape
        if tuple(advantages.shape) != (n, r):
            raise ValueError(f"advantages shape {tuple(advantages.shape)} != response shape {(n, r)}")
        if self.config.use_kl_loss and ref_logprobs is None:
            ref_logprobs = self.reference_logprobs(tensors)
        old_logprobs = tensors.old_log_probs if tensors.old_log_probs is not None else self.compute_logprobs(tensors)
        self.activate()
        columns = {"old_log_probs": old_logprobs, "advantages": advantages}
        if self.config.use_kl_loss:
            columns["ref_logprobs"] = ref_logprobs
        return columns

    def _update_mini_batch(
        self, tensors: VerlBatchTensors, columns: dict[str, torch.Tensor], rows: torch.Tensor, tally: _MetricTally
    ) -> None:
        if tensors.response_mask[rows].sum() == 0:  # nothing to learn from (e.g. all responses empty): no step
            return
        pg_loss_total, kl_loss_total = self._backward(tensors, columns, rows, tally)
        max_norm = self.config.grad_clip if self.config.grad_clip is not None else math.inf
        grad_norm = torch.nn.utils.clip_grad_norm_(self.parameters, max_norm=max_norm)
        if torch.isfinite(grad_norm):
            self.optimizer.step()
            self.optimizer_steps += 1
        else:  # as verl does: a non-finite gradient skips the update instead of poisoning the weights
            tally.skipped_steps += 1
        self.optimizer.zero_grad(set_to_none=True)
        tally.add_step("pg_loss", pg_loss_total)
        tally.add_step("grad_norm", grad_norm.item())
        if self.config.use_kl_loss:
            tally.add_step("kl_loss", kl_loss_total)

    def _backward(
        self, tensors: VerlBatchTensors, columns: dict[str, torch.Tensor], rows: torch.Tensor, tally: _MetricTally
    ) -> tuple[float, float]:
        """Zero the gradients, then accumulate the mini-batch `rows`' loss gradient micro-batch by micro-batch (the
        rows hold at least one response token); returns the mini-batch's pg loss and KL loss."""
        mask = tensors.response_mask[rows]
        num_tokens = int(mask.sum().item())
        # Each micro-batch's loss is its share of the mini-batch loss, as verl's ppo_loss does across dp ranks
        # and micro-batches: normalise by the mini-batch's tokens / sequences, not the micro-batch's.
        self.actor_config.global_batch_info.update(
            dp_size=1,
            batch_num_tokens=num_tokens,
            global_batch_size=int((mask.sum(-1) > 0).sum().item()),
            loss_scale_factor=None,
        )
        device = self._device()
        micro = self.config.micro_batch_size or len(rows)
        self.optimizer.zero_grad(set_to_none=True)
        # Micro-batch losses are shares of the mini-batch loss: their sums are the mini-batch values.
        pg_loss_total = kl_loss_total = 0.0
        for start in range(0, len(rows), micro):
            micro_rows = rows[start : start + micro]
            batch = _slice_rows(tensors, micro_rows, device, columns)
            micro_tokens = int(batch.response_mask.sum().item())
            if micro_tokens == 0:
                continue
            logprobs, entropy = self._forward(batch, with_entropy=self.config.entropy_coeff > 0)
            response_mask = batch.response_mask.bool()
            pg_loss, pg_metrics = self.policy_loss_fn(
                old_log_prob=batch.columns["old_log_probs"],
                log_prob=logprobs,
                advantages=batch.columns["advantages"],
                response_mask=response_mask,
                loss_agg_mode=self.config.loss_agg_mode,
                config=self.actor_config,
                rollout_is_weights=None,
            )
            loss = pg_loss
            if entropy is not None:
                entropy_loss = agg_loss(
                    loss_mat=entropy,
                    loss_mask=response_mask,
                    loss_agg_mode=self.config.loss_agg_mode,
                    **self.actor_config.global_batch_info,
                )
                loss = loss - self.config.entropy_coeff * entropy_loss
                tally.add_mean("entropy", (entropy.detach().sum() / micro_tokens).item(), micro_tokens)
            if self.config.use_kl_loss:
                kld = kl_penalty(
                    logprob=logprobs, ref_logprob=batch.columns["ref_logprobs"], kl_penalty=self.config.kl_type
                )
                kl_loss = agg_loss(
                    loss_mat=kld,
                    loss_mask=response_mask,
                    loss_agg_mode=self.config.loss_agg_mode,
                    **self.actor_config.global_batch_info,
                )
                loss = loss + self.config.kl_coef * kl_loss
                kl_loss_total += kl_loss.item()
            loss.backward()
            pg_loss_total += pg_loss.item()
            tally.tokens += micro_tokens
            tally.add_mean("clipfrac", pg_metrics["actor/pg_clipfrac"], micro_tokens)
            tally.add_mean("clipfrac_lower", pg_metrics["actor/pg_clipfrac_lower"], micro_tokens)
            tally.add_mean("approx_kl", pg_metrics["actor/ppo_kl"], micro_tokens)
            neg_logprob = -(logprobs.detach() * batch.response_mask).sum().item() / micro_tokens
            tally.add_mean("neg_logprob", neg_logprob, micro_tokens)
        return pg_loss_total, kl_loss_total

    def _forward(
        self, batch: _RowBatch, with_entropy: bool = False, model: torch.nn.Module | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """[n, R] log-probs of the batch's responses under `model` (default: the policy's), and their per-token
        entropies when asked for (else None)."""
        response_length = batch.response_length
        scored = self.model if model is None else model  # a Module's truth value is not "is given"
        logits = response_logits(
            scored, batch.input_ids, batch.attention_mask, response_length, self.config.share_prompts
        )
        log_probs = scaled_log_softmax(logits, self.config.temperature)
        picked = picked_logprobs(log_probs, batch.input_ids, batch.attention_mask, response_length)
        entropy = response_entropy(log_probs, batch.attention_mask, response_length) if with_entropy else None
        return picked, entropy

    def _device(self) -> torch.device:
        return self.parameters[0].device

    def state_dict(self) -> dict[str, Any]:
        """Optimizer state, shuffle-generator state, step count, and the reference model's weights when it keeps
        one (the policy's weights are saved with its model)."""
        state = {
            "optimizer": self.optimizer.state_dict(),
            "generator": self.generator.get_state(),
            "optimizer_steps": self.optimizer_steps,
        }
        if self.reference is not None:
            state["reference"] = self.reference.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore `state_dict`'s output; a trainer that keeps a reference needs one saved (else the reference would
        be whatever this trainer was built from, not the run's starting model)."""
        if self.reference is not None:
            if "reference" not in state:
                raise ValueError("update.use_kl_loss=true, but the checkpoint holds no reference model")
            self.reference.load_state_dict(state["reference"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.generator.set_state(state["generator"])
        self.optimizer_steps = int(state["optimizer_steps"])


def frozen_copy(model: torch.nn.Module) -> torch.nn.Module:
    """A copy of `model` that no optimizer can move: every parameter without gradients, in eval mode."""
    reference = copy.deepcopy(model)
    reference.requires_grad_(False)
    return reference.eval()


def prompt_groups(tensors: VerlBatchTensors) -> list[torch.Tensor]:
    """Row indices per distinct prompt (ids and mask), each group in row order, groups by first row."""
    _, group_of_row = distinct_prompts(tensors.prompts, tensors.attention_mask[:, : tensors.prompts.shape[1]])
    rows_by_group: dict[int, list[int]] = {}
    for row, group in enumerate(group_of_row.tolist()):
        rows_by_group.setdefault(group, []).append(row)
    return [torch.tensor(rows) for rows in rows_by_group.values()]


@dataclass
class _RowBatch:
    """Some rows of a VerlBatchTensors, trimmed to the columns they use, on the model's device."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    response_mask: torch.Tensor
    response_length: int
    columns: dict[str, torch.Tensor]


def _slice_rows(
    tensors: VerlBatchTensors,
    rows: torch.Tensor,
    device: torch.device,
    columns: dict[str, torch.Tensor] | None = None,
) -> _RowBatch:
    """Select rows, then drop prompt columns that are padding in every row and response columns past the longest
    response: padding changes nothing in the result, and skipping it saves compute on mixed-length batches."""
    prompt_len = tensors.prompts.shape[1]
    prompt_mask = tensors.attention_mask[rows, :prompt_len]
    response_mask = tensors.response_mask[rows]
    first_prompt_column = int((prompt_mask.sum(0) > 0).nonzero().min().item()) if prompt_mask.any() else prompt_len - 1
    response_length = max(1, int(response_mask.sum(-1).max().item()))
    keep = slice(first_prompt_column, prompt_len + response_length)
    return _RowBatch(
        input_ids=tensors.input_ids[rows, keep].to(device),
        attention_mask=tensors.attention_mask[rows, keep].to(device),
        response_mask=response_mask[:, :response_length].to(device),
        response_length=response_length,
        columns={name: value[rows, :response_length].to(device) for name, value in (columns or {}).items()},
    )


class _MetricTally:
    """Accumulates token-weighted means and per-optimizer-step values over one `step` call."""

    def __init__(self) -> None:
        self.weighted_sums: dict[str, float] = {}
        self.weights: dict[str, float] = {}
        self.step_values: dict[str, list[float]] = {}
        self.tokens = 0
        self.skipped_steps = 0

    def add_mean(self, name: str, value: float, weight: int) -> None:
        self.weighted_sums[name] = self.weighted_sums.get(name, 0.0) + value * weight
        self.weights[name] = self.weights.get(name, 0.0) + weight

    def add_step(self, name: str, value: float) -> None:
        self.step_values.setdefault(name, []).append(value)

    def summary(self, lr: float, optimizer_steps: int) -> dict[str, float]:
        metrics = {name: total / self.weights[name] for name, total in self.weighted_sums.items()}
        for name, values in self.step_values.items():
            metrics[name] = sum(values) / len(values)
        metrics.update(
            lr=lr,
            tokens=float(self.tokens),
            optimizer_steps=float(optimizer_steps),
            skipped_steps=float(self.skipped_steps),
        )
        return metrics
