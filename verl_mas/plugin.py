"""verl plugin entry point: registers the `at_grpo` estimator and the `cpu` platform into verl (kept light)."""

from verl.trainer.ppo.core_algos import register_adv_est

from verl_mas.advantage import ESTIMATOR_NAME, compute_at_grpo_advantage
from verl_mas.verl_engine import cpu

register_adv_est(ESTIMATOR_NAME)(compute_at_grpo_advantage)
cpu.register()
