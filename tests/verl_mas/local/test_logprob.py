"""Training-side log-probs: hand-computed values, padding layout, and exact agreement with the sampler's."""

import asyncio
import math

import pytest
import torch

from verl_mas.local.generator import BatchingGenerator, SamplingConfig
from verl_mas.local.logprob import (
    response_entropy,
    response_logits,
    response_logprobs,
    scaled_log_softmax,
    sequence_logprobs,
)
from verl_mas.local.model import build_tiny_model
from verl_mas.local.tokenizer import train_tokenizer
from verl_mas.rollout import GenerationRequest
from verl_mas.sample import Sample, samples_to_tensors

CORPUS = [f"the sum of {a} and {b} is {a + b}. move up, then left!" for a in range(20) for b in range(20)]


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(CORPUS, vocab_size=320)


@pytest.fixture(scope="module")
def model(tokenizer):
    model = build_tiny_model(len(tokenizer), hidden=48, layers=2, heads=4, seed=11, eos_token_id=tokenizer.eos_token_id)
    # Make eos likely enough that responses come out with mixed lengths.
    head = torch.nn.Linear(model.lm_head.in_features, model.lm_head.out_features, bias=True)
    with torch.no_grad():
        head.weight.copy_(model.lm_head.weight)
        head.bias.zero_()
        head.bias[tokenizer.eos_token_id] = 4.5
    model.lm_head = head
    return model


def test_scaled_log_softmax_by_hand():
    logits = torch.tensor([[0.0, math.log(3.0)]])
    assert torch.allclose(scaled_log_softmax(logits, 1.0), torch.log(torch.tensor([[0.25, 0.75]])))
    # T = 0.5 squares the odds: 1 : 9.
    assert torch.allclose(scaled_log_softmax(logits, 0.5), torch.log(torch.tensor([[0.1, 0.9]])))
    with pytest.raises(ValueError, match="temperature"):
        scaled_log_softmax(logits, 0.0)


def test_padding_and_batch_mates_do_not_change_a_sequences_logprobs(model):
    prompt, response = [5, 9, 30, 41], [77, 12, 3]
    alone = sequence_logprobs(model, [prompt], [response], 1.0, pad_id=0)[0]
    batched = sequence_logprobs(model, [[8] * 11, prompt], [[6] * 9, response], 1.0, pad_id=0)
    assert batched[0].shape == (9,) and batched[1].shape == (3,)
    assert torch.allclose(batched[1], alone, atol=1e-5, rtol=0)


def test_response_logprobs_zero_outside_the_mask(model):
    input_ids = torch.tensor([[0, 0, 5, 6, 7, 8, 0], [1, 2, 3, 4, 5, 6, 7]])
    attention_mask = torch.tensor([[0, 0, 1, 1, 1, 1, 0], [1, 1, 1, 1, 1, 1, 1]])
    logprobs = response_logprobs(model, input_ids, attention_mask, response_length=3, temperature=1.0)
    assert logprobs.shape == (2, 3)
    assert logprobs[0, 2] == 0 and (logprobs[0, :2] < 0).all() and (logprobs[1] < 0).all()


def sample_generations(model, tokenizer, temperature, seed=0):
    generate = BatchingGenerator(
        {"p": (model, tokenizer)}, SamplingConfig(temperature=temperature, max_new_tokens=10), seed=seed
    )
    requests = [
        GenerationRequest(f"t{i}/r", "p", "r", ({"role": "user", "content": "move up " * (i * 3 % 7) + str(i)},), 3)
        for i in range(6)
    ]

    async def main():
        return await asyncio.gather(*(generate(r) for r in requests))

    return [g for gens in asyncio.run(main()) for g in gens]


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_recomputed_logprobs_match_the_samplers(model, tokenizer, temperature):
    generations = sample_generations(model, tokenizer, temperature)
    assert len({len(g.prompt_ids) for g in generations}) > 1 and len({len(g.response_ids) for g in generations}) > 1
    with torch.no_grad():
        recomputed = sequence_logprobs(
            model,
            [g.prompt_ids for g in generations],
            [g.response_ids for g in generations],
            temperature,
            tokenizer.pad_token_id,
        )
    for g, lp in zip(generations, recomputed, strict=True):
        assert torch.allclose(lp, torch.tensor(g.logprobs), atol=1e-4, rtol=0)
    # The temperature is part of the policy: scoring at another one does not match.
    with torch.no_grad():
        other = sequence_logprobs(model, [generations[0].prompt_ids], [generations[0].response_ids], 1.3, 0)[0]
    assert not torch.allclose(other, torch.tensor(generations[0].logprobs), atol=1e-3)


def test_recomputed_on_verl_batch_tensors_matches_old_log_probs(model, tokenizer):
    generations = sample_generations(model, tokenizer, 0.7, seed=1)
    samples = [
        Sample("t", "r", 0, b, "p", g.prompt_ids, g.response_ids, g.logprobs, 0.0, 0.0, 0.0, False)
        for b, g in enumerate(generations)
    ]
    batch = samples_to_tensors(samples, tokenizer.pad_token_id)
    with torch.no_grad():
        logprobs = response_logprobs(model, batch.input_ids, batch.attention_mask, batch.responses.shape[1], 0.7)
    assert torch.allclose(logprobs * batch.response_mask, batch.old_log_probs, atol=1e-4, rtol=0)


def test_gradients_flow_for_training(model):
    logprobs = sequence_logprobs(model, [[5, 6, 7]], [[8, 9]], 1.0, pad_id=0)[0]
    logprobs.sum().backward()
    assert model.lm_head.weight.grad is not None and model.lm_head.weight.grad.abs().sum() > 0
    model.zero_grad(set_to_none=True)


# Rows sharing prompts as a tree node's K branches do: three prompts of different lengths, responses of lengths 1-4
# (a length-1 response is predicted by the prompt pass alone), and one prompt that is a prefix of another.
SHARED_PROMPT_ROWS = [
    ([5, 9, 30, 41], [77, 12, 3]),
    ([5, 9, 30, 41], [8]),
    ([5, 9, 30, 41], [60, 61, 62, 63]),
    ([7, 7], [11, 12]),
    ([5, 9, 30], [41, 77]),
    ([7, 7], [11, 12]),
]


def padded_rows(rows):
    samples = [Sample("t", "r", 0, b, "p", p, r, None, 0.0, 0.0, 0.0, False) for b, (p, r) in enumerate(rows)]
    return samples_to_tensors(samples, pad_token_id=0)


@pytest.mark.parametrize("temperature", [1.0, 0.6])
def test_shared_prompts_give_the_per_row_logprobs_and_gradients(model, temperature):
    tensors = padded_rows(SHARED_PROMPT_ROWS)
    response_length = tensors.responses.shape[1]
    weights = torch.linspace(-1.0, 2.0, tensors.response_mask.numel()).reshape(tensors.response_mask.shape)
    results = {}
    for share in (False, True):
        model.zero_grad(set_to_none=True)
        logprobs = response_logprobs(
            model, tensors.input_ids, tensors.attention_mask, response_length, temperature, share_prompts=share
        )
        (logprobs * weights).sum().backward()
        results[share] = (logprobs.detach(), [p.grad.clone() for p in model.parameters()])
    model.zero_grad(set_to_none=True)
    torch.testing.assert_close(results[True][0], results[False][0], atol=1e-5, rtol=0)
    assert (results[True][0][tensors.response_mask == 0] == 0).all()
    for shared_grad, per_row_grad in zip(results[True][1], results[False][1], strict=True):
        torch.testing.assert_close(shared_grad, per_row_grad, atol=1e-5, rtol=1e-4)


def forward_shapes(model, tensors):
    """The input_ids shape of every forward call that scoring `tensors` makes."""
    shapes = []
    hook = model.register_forward_pre_hook(
        lambda _, args, kwargs: shapes.append(tuple(kwargs["input_ids"].shape)), with_kwargs=True
    )
    try:
        with torch.no_grad():
            response_logprobs(model, tensors.input_ids, tensors.attention_mask, tensors.responses.shape[1], 1.0)
    finally:
        hook.remove()
    return shapes


def test_shared_prompts_run_each_distinct_prompt_once(model):
    tensors = padded_rows(SHARED_PROMPT_ROWS)
    # 3 distinct prompts at full prompt width, then the 6 rows' responses less the last token (4 - 1 columns).
    assert forward_shapes(model, tensors) == [(3, tensors.prompts.shape[1]), (6, 3)]


def test_rows_that_share_nothing_take_one_pass(model):
    tensors = padded_rows([SHARED_PROMPT_ROWS[0], SHARED_PROMPT_ROWS[3]])
    assert forward_shapes(model, tensors) == [tuple(tensors.input_ids.shape)]


def test_a_model_without_a_cache_gets_a_clear_error(model):
    class NoCache(torch.nn.Module):
        """Delegates to the model but drops the key/value cache from every output."""

        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, **kwargs):
            out = self.inner(**kwargs)
            out.past_key_values = None
            return out

    tensors = padded_rows(SHARED_PROMPT_ROWS)
    with torch.no_grad(), pytest.raises(ValueError, match="share_prompts=false"):
        response_logprobs(NoCache(model), tensors.input_ids, tensors.attention_mask, tensors.responses.shape[1], 1.0)
    with torch.no_grad():
        per_row = response_logprobs(
            NoCache(model), tensors.input_ids, tensors.attention_mask, tensors.responses.shape[1], 1.0, False
        )
    assert per_row.shape == tensors.response_mask.shape


@pytest.mark.parametrize("share", [False, True])
@pytest.mark.parametrize("temperature", [1.0, 0.6])
def test_entropy_is_that_of_each_response_tokens_sampling_distribution(model, temperature, share):
    tensors = padded_rows(SHARED_PROMPT_ROWS)
    response_length = tensors.responses.shape[1]
    with torch.no_grad():
        logits = response_logits(model, tensors.input_ids, tensors.attention_mask, response_length, share)
        entropy = response_entropy(scaled_log_softmax(logits, temperature), tensors.attention_mask, response_length)
    # By hand, one row at a time and unpadded: the distribution before response token j is the model's output at
    # the position just before it, at the sampling temperature.
    assert tensors.prompts.shape[1] > 0
    for i in range(tensors.input_ids.shape[0]):
        keep = tensors.attention_mask[i].bool()
        ids = tensors.input_ids[i][keep].unsqueeze(0)
        n_response = int(tensors.response_mask[i].sum())
        with torch.no_grad():
            logits = model(input_ids=ids).logits[0, -n_response - 1 : -1] / temperature
        probs = torch.softmax(logits.double(), dim=-1)
        expected = -(probs * probs.log()).sum(-1)
        torch.testing.assert_close(entropy[i, :n_response].double(), expected, atol=1e-5, rtol=0)
        assert (entropy[i, n_response:] == 0).all()
