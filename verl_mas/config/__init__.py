"""verl-mas's hydra configs (`mas_trainer.yaml`) and the agent-loop file verl's workers load (`agent_loops.yaml`)."""
