"""The verl engine: multi-agent agent loop, per-role routing client and AT-GRPO trainer for verl 0.9.1."""
