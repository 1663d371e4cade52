"""families: see docs/architecture.md."""
