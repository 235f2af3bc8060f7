"""Local engine: tokenizer, tiny or loaded LMs, batched sampling, PPO update, training loop, checkpoints, evaluation."""
