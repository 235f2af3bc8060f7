"""The rollout parity study: one fixed policy's rollouts through verl's stack against the local engine."""
