"""checkpoints: see docs/architecture.md."""
