"""verl-mas: multi-agent AT-GRPO training as a verl plugin (kept light: imports nothing heavy)."""

__version__ = "0.1.0"
# The names plugin.py registers into verl, spelled once: what algorithm.adv_estimator and trainer.device select.
ESTIMATOR = "at_grpo"
PLATFORM = "cpu"
