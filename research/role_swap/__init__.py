"""The role-swap probe: a per_role run evaluated as trained and with its two roles' models swapped."""
