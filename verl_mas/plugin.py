"""verl plugin entry point: registers the `at_grpo` estimator into verl's registry (kept light)."""

from verl.trainer.ppo.core_algos import register_adv_est

from verl_mas.advantage import ESTIMATOR_NAME, compute_at_grpo_advantage

register_adv_est(ESTIMATOR_NAME)(compute_at_grpo_advantage)
