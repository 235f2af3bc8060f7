"""The Plan-Path study of 500-1000 RL steps from the learning table's warm starts (runs research.learning)."""
