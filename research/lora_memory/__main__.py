"""`python -m research.lora_memory`: the memory and step time of one base with an adapter per role."""

from research.lora_memory.lora_memory import main

main()
