"""The verl stack on CPU on the code and math environments: one short run each."""
