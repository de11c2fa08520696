"""terminals."""
