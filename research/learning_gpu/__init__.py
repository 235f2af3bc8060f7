"""The Plan-Path study on a GPU: bigger models, more warm-start data, bigger boards (runs research.learning)."""
