"""verl-mas environments: grid puzzles (Plan-Path, Sokoban) played by a tool agent and a plan agent."""
