"""The folder where scaling caches machine facts (CPU peak FLOP/s, token-file fingerprints)."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """``$SCALING_CACHE_DIR``, default ``~/.cache/scaling``."""
    return Path(os.environ.get("SCALING_CACHE_DIR", Path.home() / ".cache" / "scaling"))
