"""workflows package (see docs/ARCHITECTURE.md)."""
