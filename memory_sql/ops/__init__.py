"""ops stage."""
