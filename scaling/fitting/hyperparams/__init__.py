"""hyperparams: see docs/architecture.md."""
