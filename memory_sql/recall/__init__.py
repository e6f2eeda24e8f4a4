"""recall stage."""
