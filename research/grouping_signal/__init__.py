"""How well one batch's policy gradient agrees with the expected gradient, per grouping and role reward offset."""
