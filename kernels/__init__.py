"""kernels package (see docs/ARCHITECTURE.md)."""
