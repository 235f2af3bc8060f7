"""The embedded default run (make run): recorded, checked and shown against its committed record."""
