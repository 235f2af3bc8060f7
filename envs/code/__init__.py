"""Code: the coder + tester environment (`env`), problems by source (`problems`), coding tasks and their cases
(`cases`), loaders of the public problem files (`data`), the judge (`judge`, one sandbox run per program or per set
of trusted ones; `harness` is the program that run executes) and known-wrong programs made from a reference
(`mutants`)."""
