"""What `make` runs before the project is installed."""
