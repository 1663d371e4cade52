"""parallel: see docs/architecture.md."""
