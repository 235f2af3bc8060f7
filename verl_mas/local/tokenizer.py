"""A small byte-level BPE chat tokenizer trained locally from texts, with pad/bos/eos and role markers."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import AutoTokenizer, PreTrainedTokenizerBase, PreTrainedTokenizerFast

from verl_mas.pretrained import prepared_path

PAD, BOS, EOS = "<pad>", "<bos>", "<eos>"
CHAT_ROLES = ("system", "user", "assistant")
ROLE_MARKERS = tuple(f"<|{role}|>" for role in CHAT_ROLES)
SPECIAL_TOKENS = (PAD, BOS, EOS, *ROLE_MARKERS)

# Every message is "<|role|>content<eos>", so a model trained on rendered conversations learns to end its turn with eos.
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{% if message['role'] not in ['system', 'user', 'assistant'] %}"
    "{{ raise_exception('unknown chat role: ' + message['role']) }}"
    "{% endif %}"
    "{{ '<|' + message['role'] + '|>' + message['content'] + eos_token }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}"
)

BYTE_ALPHABET_SIZE = 256


def train_tokenizer(texts: Iterable[str], vocab_size: int = 512, min_frequency: int = 2) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE on `texts`: any text encodes (no unknown token) and decodes back exactly.

    Merges stay within runs of letters (with their leading space): digits and symbols are single tokens.
    """
    smallest = BYTE_ALPHABET_SIZE + len(SPECIAL_TOKENS)
    if vocab_size < smallest:
        raise ValueError(f"tokenizer vocab_size must be >= {smallest} (256 bytes + special tokens), got {vocab_size}")
    core = Tokenizer(models.BPE())
    # Every digit and symbol is its own token, so a small model reads a board cell by cell and a number digit by
    # digit instead of through merges such as "#.." that change with the neighbouring cells.
    core.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(r" ?[^\sA-Za-z]"), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False),
        ]
    )
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    core.train_from_iterator(texts, trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token=PAD, bos_token=BOS, eos_token=EOS, padding_side="left"
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def render_prompt(tokenizer: PreTrainedTokenizerBase, messages: Sequence[Mapping[str, str]]) -> list[int]:
    """A conversation's prompt ids through the tokenizer's chat template with the assistant's turn opened: the ids
    verl's agent loop builds for the same messages (its continuous-token builder renders them this way)."""
    return list(
        tokenizer.apply_chat_template(list(messages), add_generation_prompt=True, tokenize=True, return_dict=False)
    )


def load_tokenizer(path: str | Path) -> PreTrainedTokenizerBase:
    """Load a tokenizer saved with `save_pretrained` (ours or any HF checkpoint's, or a registered pretrained model's
    by name); pad falls back to eos."""
    tokenizer = AutoTokenizer.from_pretrained(prepared_path(str(path)))
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer
