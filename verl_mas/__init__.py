"""verl-mas: multi-agent AT-GRPO training as a verl plugin (kept light: imports nothing heavy)."""

__version__ = "0.1.0"
