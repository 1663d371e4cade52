"""`scaling` commands of the report group (registered on the shared app)."""

from __future__ import annotations

from scaling.cli.common import app  # noqa: F401
