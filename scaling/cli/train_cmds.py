"""`scaling` commands of the train group (registered on the shared app)."""

from __future__ import annotations

from scaling.cli.common import app  # noqa: F401
