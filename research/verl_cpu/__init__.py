"""The first comparison of AT-GRPO through verl's stack on CPU with the local engine."""
