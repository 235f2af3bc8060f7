"""The locally trained chat tokenizer: special tokens, chat template, exact round trip, save/load."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from verl_mas.local.tokenizer import BOS, EOS, PAD, ROLE_MARKERS, SPECIAL_TOKENS, load_tokenizer, train_tokenizer

CORPUS = [f"the sum of {a} and {b} is {a + b}. move up, then left!" for a in range(20) for b in range(20)]
MESSAGES = [{"role": "system", "content": "You solve sums."}, {"role": "user", "content": "What is 3 + 4?"}]


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(CORPUS, vocab_size=400)


def test_special_tokens_are_single_distinct_ids(tokenizer):
    ids = [tokenizer.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS]
    assert len(set(ids)) == len(SPECIAL_TOKENS)
    assert (tokenizer.pad_token, tokenizer.bos_token, tokenizer.eos_token) == (PAD, BOS, EOS)
    for token in SPECIAL_TOKENS:
        assert tokenizer.encode(token, add_special_tokens=False) == [tokenizer.convert_tokens_to_ids(token)]


def test_bpe_learned_merges_within_vocab_size(tokenizer):
    assert 256 + len(SPECIAL_TOKENS) < len(tokenizer) <= 400
    assert len(tokenizer.encode("the sum of", add_special_tokens=False)) < len("the sum of")


def test_chat_template_renders_roles_and_generation_prompt(tokenizer):
    text = tokenizer.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=False)
    assert text == "<bos><|system|>You solve sums.<eos><|user|>What is 3 + 4?<eos><|assistant|>"
    ids = tokenizer.apply_chat_template(MESSAGES, add_generation_prompt=True, return_dict=True)["input_ids"]
    assert ids[0] == tokenizer.bos_token_id
    assert ids[-1] == tokenizer.convert_tokens_to_ids(ROLE_MARKERS[2])
    assert ids == tokenizer.encode(text, add_special_tokens=False)
    without_prompt = tokenizer.apply_chat_template(MESSAGES, add_generation_prompt=False, tokenize=False)
    assert without_prompt.endswith("<eos>")


def test_chat_template_rejects_unknown_role(tokenizer):
    with pytest.raises(Exception, match="unknown chat role: tool"):
        tokenizer.apply_chat_template([{"role": "tool", "content": "x"}], tokenize=False)


def test_decode_skips_special_tokens(tokenizer):
    ids = tokenizer.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=False)
    assert tokenizer.decode(tokenizer.encode(ids, add_special_tokens=False), skip_special_tokens=True) == (
        "You solve sums.What is 3 + 4?"
    )


@settings(max_examples=60, deadline=None)
@given(text=st.text(max_size=40))
def test_any_text_round_trips_exactly(tokenizer, text):
    ids = tokenizer.encode(text, add_special_tokens=False)
    assert tokenizer.decode(ids) == text


def test_training_is_deterministic():
    assert train_tokenizer(CORPUS, vocab_size=350).get_vocab() == train_tokenizer(CORPUS, vocab_size=350).get_vocab()


def test_vocab_smaller_than_bytes_plus_specials_is_rejected():
    with pytest.raises(ValueError, match="vocab_size must be >= 262"):
        train_tokenizer(CORPUS, vocab_size=100)


def test_save_and_load_keep_vocab_specials_and_template(tokenizer, tmp_path):
    tokenizer.save_pretrained(tmp_path)
    loaded = load_tokenizer(tmp_path)
    text = tokenizer.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=False)
    assert loaded.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=False) == text
    assert loaded.encode(text, add_special_tokens=False) == tokenizer.encode(text, add_special_tokens=False)
    assert (loaded.pad_token_id, loaded.eos_token_id, loaded.bos_token_id) == (
        tokenizer.pad_token_id,
        tokenizer.eos_token_id,
        tokenizer.bos_token_id,
    )
