"""The code tester study: its reward rules in training, and the scripts that read its runs and warm starts."""
