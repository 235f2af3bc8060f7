"""Math: the reasoner + tool agent environment (`env`), problems by source (`problems`), loaders of the public problem
files (`data`), and the final-answer grader (`grading`) with its math-verify worker process (`verify_pool`,
`verify_worker`, started with `-m`: this package imports nothing, so the worker starts light)."""
