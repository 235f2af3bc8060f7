"""Local engine: a tokenizer trained in seconds, tiny or loaded causal LMs, a batching sampler and log-prob recompute."""
