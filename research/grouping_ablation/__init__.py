"""The grouping ablation in a regime that learns: tool cost 0 and 2, arms task, task_role, task_role_turn."""
