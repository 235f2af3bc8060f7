"""The code-mode study of a warm start that also covers turns 2 and 3 (data and figures only)."""
