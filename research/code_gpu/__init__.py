"""The code-mode study on a GPU: five seeds from the code_tool preset's warm start (data and figures only)."""
