"""customizations."""
