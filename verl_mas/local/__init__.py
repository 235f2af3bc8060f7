"""Local engine: config, tokenizer, tiny or loaded LMs, warm start, batched sampling, PPO update, training loop,
checkpoints, evaluation, reporting."""
