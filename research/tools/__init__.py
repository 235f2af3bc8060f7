"""Analysis scripts several studies use: training windows, what one update does, training on fixed tasks."""
