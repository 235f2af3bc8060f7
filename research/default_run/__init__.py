"""The tiny default run (`verl-mas train`, no overrides): recorded, checked and shown against its committed record."""
