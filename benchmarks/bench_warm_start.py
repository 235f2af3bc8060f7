"""Benchmark: one warm-start epoch scoring response positions only, against the label loss on every position."""

from __future__ import annotations

import argparse
import copy
import json
import math
import platform
import random
import time
from pathlib import Path

import torch

from verl_mas.env import make_env
from verl_mas.local.config import WarmStartConfig, resolved_warm_start
from verl_mas.local.model import build_tiny_model
from verl_mas.local.presets import resolve_train_config
from verl_mas.local.tokenizer import render_prompt
from verl_mas.local.warm_start import collect_expert_pairs, expert_tokenizer, warm_start
from verl_mas.overrides import parse_overrides
from verl_mas.router import PolicyRouter

RESULTS = Path(__file__).parent / "results" / "warm_start.json"


def label_loss_epoch(model, tokenizer, examples, config: WarmStartConfig, seed: int) -> float:
    """The baseline: right-padded prompt + response rows, `labels` masking the prompt, logits at every position."""
    rows = []
    for messages, move in examples:
        prompt = render_prompt(tokenizer, messages)
        rows.append((prompt, tokenizer.encode(move, add_special_tokens=False) + [tokenizer.eos_token_id]))
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=0.0)
    random.Random(seed).shuffle(rows)
    losses = []
    for start in range(0, len(rows), config.batch_size):
        batch = rows[start : start + config.batch_size]
        width = max(len(p) + len(r) for p, r in batch)
        input_ids = torch.full((len(batch), width), tokenizer.pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros_like(input_ids)
        labels = torch.full_like(input_ids, -100)
        for i, (prompt, response) in enumerate(batch):
            input_ids[i, : len(prompt) + len(response)] = torch.tensor(prompt + response)
            attention_mask[i, : len(prompt) + len(response)] = 1
            labels[i, len(prompt) : len(prompt) + len(response)] = torch.tensor(response)
        loss = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        losses.append(loss.item())
    return sum(losses) / len(losses)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tasks", type=int, default=256, help="warm-start boards (default: %(default)s)")
    parser.add_argument("--repeats", type=int, default=2, help="epochs timed per method, alternating (best kept)")
    parser.add_argument("overrides", nargs="*", help="key=value training-config overrides (as for verl-mas train)")
    args = parser.parse_args()
    config = resolve_train_config(parse_overrides([f"warm_start.tasks={args.tasks}", *args.overrides]))
    roles = make_env(config.env, **config.env_options).workflow().roles
    router = PolicyRouter.from_spec(config.router, roles)
    pairs = collect_expert_pairs(config, router)
    tokenizer = expert_tokenizer(pairs, config.model.vocab_size)
    spec = config.model
    model = build_tiny_model(len(tokenizer), spec.hidden, spec.layers, spec.heads, spec.max_positions, seed=0)
    examples = [(pair.messages, pair.move) for pair in pairs]
    one_epoch = WarmStartConfig(
        epochs=1, lr=resolved_warm_start(config).lr, batch_size=config.warm_start.batch_size, lr_schedule="constant"
    )
    seconds: dict[str, float] = {"label loss (baseline)": math.inf, "response positions": math.inf}
    losses: dict[str, float] = {}
    for _ in range(args.repeats):
        for method in seconds:
            trained = copy.deepcopy(model)
            started = time.perf_counter()
            if method == "response positions":
                losses[method] = warm_start(trained, tokenizer, examples, one_epoch, seed=0)
            else:
                losses[method] = label_loss_epoch(trained, tokenizer, examples, one_epoch, seed=0)
            seconds[method] = min(seconds[method], time.perf_counter() - started)
    baseline = seconds["label loss (baseline)"]
    print(f"{config.env}: {len(examples)} expert moves, batch {one_epoch.batch_size}, model hidden {spec.hidden}")
    print(f"{torch.get_num_threads()} threads, torch {torch.__version__}, {platform.machine()}")
    for method, elapsed in seconds.items():
        print(f"{method}: {elapsed:.2f} s per epoch, mean loss {losses[method]:.4f}, ratio {baseline / elapsed:.2f}x")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({"examples": len(examples), "seconds": seconds, "losses": losses}, indent=2))


if __name__ == "__main__":
    main()
