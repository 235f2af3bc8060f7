"""The code-mode study on 6x6 boards: room for RL after the warm start (data and figures only)."""
