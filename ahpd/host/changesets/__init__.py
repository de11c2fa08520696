"""changesets."""
