"""What one base model with a LoRA adapter per role saves against one LoRA policy per role (the benchmark's records)."""
