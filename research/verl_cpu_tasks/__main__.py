"""`python -m research.verl_cpu_tasks`: one short verl CPU-stack run on code or math."""

from research.verl_cpu_tasks.verl_cpu_tasks import main

main()
