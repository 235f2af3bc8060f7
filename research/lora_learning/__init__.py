"""L2 (one base model, one LoRA adapter per role) learning through verl's stack and the local engine."""
