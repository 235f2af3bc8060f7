"""The grouping study: AT-GRPO's (task, role, turn) groups against coarser groups and the no-tree rollout."""
