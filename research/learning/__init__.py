"""The learning study: held-out success of the training methods per env and seed, on the learning harness."""
