"""Local engine: a tokenizer trained in seconds, tiny or loaded causal LMs, batched sampling, log-prob recompute."""
