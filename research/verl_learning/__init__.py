"""The learning study through verl's stack on CPU, beside the local engine, per router."""
