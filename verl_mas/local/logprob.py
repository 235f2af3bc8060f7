"""Per-token log-probs of responses under a policy: the one definition both the sampler and training use."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import PreTrainedModel


def scaled_log_softmax(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """log softmax(logits / temperature) in float32: the distribution the sampler draws from and training scores.

    Nothing else (repetition penalty, logit bias, ...) belongs here: whatever shapes sampling must also shape the
    recomputed log-probs, or the sampled policy is not the trained one (at-grpo notes, defect 11).
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    return torch.log_softmax(logits.float() / temperature, dim=-1)


def position_ids_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """Positions count real tokens only, so a left-padded row sees the same positions as the unpadded sequence."""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


def prefill(model: PreTrainedModel, input_ids: torch.Tensor, attention_mask: torch.Tensor):
    """One pass over left-padded prompts that keeps their keys and values and the last position's logits."""
    return model(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids_from_mask(attention_mask),
        use_cache=True,
        logits_to_keep=1,
    )


def distinct_prompts(prompt_ids: torch.Tensor, prompt_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows with the same prompt ids and mask are one prompt: the [U, 2P] distinct (ids | mask) rows, sorted, and
    each row's index into them."""
    return torch.unique(torch.cat([prompt_ids, prompt_mask], dim=1), dim=0, return_inverse=True)


def response_logprobs(
    model: PreTrainedModel,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    response_length: int,
    temperature: float,
    share_prompts: bool = True,
) -> torch.Tensor:
    """[N, R] log-probs of the last `response_length` tokens of each row, 0 where the mask is 0.

    The layout is verl's (`VerlBatchTensors.input_ids` / `attention_mask`: left-padded prompts followed by
    right-padded responses). With `share_prompts`, rows with the same prompt (ids and mask), such as the K branches
    of one tree node, run that prompt once and reuse its keys and values; the values and gradients are those of
    one forward pass per row, at a fraction of the cost when prompts are long and responses short.
    """
    logits = response_logits(model, input_ids, attention_mask, response_length, share_prompts)
    return picked_logprobs(scaled_log_softmax(logits, temperature), input_ids, attention_mask, response_length)


def response_logits(
    model: PreTrainedModel,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    response_length: int,
    share_prompts: bool = True,
) -> torch.Tensor:
    """[N, R, V] logits predicting the last `response_length` tokens of each row (see `response_logprobs`)."""
    if response_length < 1:
        raise ValueError(f"response_length must be >= 1, got {response_length}")
    prompt_length = input_ids.shape[1] - response_length
    if share_prompts and prompt_length > 0:
        unique_prompts, row_prompt = distinct_prompts(input_ids[:, :prompt_length], attention_mask[:, :prompt_length])
        if unique_prompts.shape[0] < input_ids.shape[0]:
            return _shared_prompt_logits(
                model,
                unique_prompts[:, :prompt_length],
                unique_prompts[:, prompt_length:],
                row_prompt,
                input_ids,
                attention_mask,
                response_length,
            )
    outputs = model(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids_from_mask(attention_mask),
        use_cache=False,
        logits_to_keep=response_length + 1,
    )
    # The logit at position t predicts token t + 1: drop the last one, which predicts past the end.
    return outputs.logits[:, :-1, :]


def _shared_prompt_logits(
    model: PreTrainedModel,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    row_prompt: torch.Tensor,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    response_length: int,
) -> torch.Tensor:
    """[N, R, V] logits predicting each row's response tokens: one pass over the U distinct prompts, their cache
    gathered to the N rows (`row_prompt[i]` is row i's prompt), then one pass over the responses on top of it."""
    prompt_out = prefill(model, prompt_ids, prompt_mask)
    first_token_logits = prompt_out.logits[row_prompt]  # [N, 1, V]: the last prompt position predicts token 0
    if response_length == 1:
        return first_token_logits
    cache = prompt_out.past_key_values
    if cache is None:
        raise ValueError(
            f"{type(model).__name__} returned no key/value cache for the shared prompt pass; "
            "set update.share_prompts=false to score each row in one full pass"
        )
    cache.batch_select_indices(row_prompt)  # indexing keeps the graph: gradients flow back to the shared prompt
    # The last response token predicts past the end, so it is not fed; positions continue each row's prompt.
    fed = input_ids.shape[1] - 1
    response_out = model(
        input_ids=input_ids[:, -response_length:-1],
        attention_mask=attention_mask[:, :fed],
        position_ids=position_ids_from_mask(attention_mask[:, :fed])[:, -(response_length - 1) :],
        past_key_values=cache,
        use_cache=True,
    )
    return torch.cat([first_token_logits, response_out.logits], dim=1)


def picked_logprobs(
    log_probs: torch.Tensor, input_ids: torch.Tensor, attention_mask: torch.Tensor, response_length: int
) -> torch.Tensor:
    """[N, R] each response token's log-prob out of [N, R, V] log-probs, 0 where the mask is 0."""
    token_logprobs = log_probs.gather(-1, input_ids[:, -response_length:].unsqueeze(-1)).squeeze(-1)
    return token_logprobs * attention_mask[:, -response_length:].to(token_logprobs.dtype)


def response_entropy(log_probs: torch.Tensor, attention_mask: torch.Tensor, response_length: int) -> torch.Tensor:
    """[N, R] the entropy of each response position's distribution, from its [N, R, V] log-probs; 0 where the
    mask is 0. With log-probs at the sampling temperature, this is the entropy of what the sampler drew from."""
    entropy = -(log_probs.exp() * log_probs).sum(-1)
    return entropy * attention_mask[:, -response_length:].to(entropy.dtype)


def sequence_logprobs(
    model: PreTrainedModel,
    prompts_ids: Sequence[Sequence[int]],
    responses_ids: Sequence[Sequence[int]],
    temperature: float,
    pad_id: int,
) -> list[torch.Tensor]:
    """Log-probs of each response given its prompt, one 1-D tensor per sequence, from a single padded forward."""
    if len(prompts_ids) != len(responses_ids) or not prompts_ids:
        raise ValueError(f"sequence_logprobs: {len(prompts_ids)} prompts for {len(responses_ids)} responses")
    device = next(model.parameters()).device
    n = len(prompts_ids)
    prompt_len = max(len(p) for p in prompts_ids)
    response_len = max(1, max(len(r) for r in responses_ids))
    input_ids = torch.full((n, prompt_len + response_len), pad_id, dtype=torch.long)
    attention_mask = torch.zeros_like(input_ids)
    for i, (prompt, response) in enumerate(zip(prompts_ids, responses_ids, strict=True)):
        if not prompt:
            raise ValueError(f"sequence_logprobs: prompt {i} is empty (the first response token needs a context)")
        input_ids[i, prompt_len - len(prompt) : prompt_len] = torch.tensor(prompt, dtype=torch.long)
        input_ids[i, prompt_len : prompt_len + len(response)] = torch.tensor(response, dtype=torch.long)
        attention_mask[i, prompt_len - len(prompt) : prompt_len + len(response)] = 1
    logprobs = response_logprobs(model, input_ids.to(device), attention_mask.to(device), response_len, temperature)
    return [logprobs[i, : len(r)] for i, r in enumerate(responses_ids)]
