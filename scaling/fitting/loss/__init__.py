"""loss: see docs/architecture.md."""
