"""Errors a user can cause.

The CLI prints a :class:`UserError` as one line on stderr and exits 2. Anything that is not a
``UserError`` is a bug in scaling and keeps its traceback.
"""

from __future__ import annotations


class UserError(Exception):
    """Something the user can fix: bad input, a missing file, an unreachable service."""

    exit_code = 2

    def one_line(self) -> str:
        """The message on one line, as the CLI prints it."""
        text = " ".join(str(self).split())
        return f"error: {text}" if text else f"error: {type(self).__name__}"


class PlanError(UserError):
    """A plan file that cannot be read, parsed or validated."""


class SpecError(UserError):
    """A run specification with invalid values."""


class DatabaseError(UserError):
    """A database URL that is malformed, unreachable, read-only, or at an old schema."""


class SchemaOutdatedError(DatabaseError):
    """The database's schema is older than the code; `scaling db upgrade` fixes it."""


class NotFoundError(UserError):
    """A named sweep, run or file that does not exist."""


class FitError(UserError):
    """Data that cannot support the requested fit (too few points, one size, bad losses)."""


class ResourceError(UserError):
    """A run that cannot fit the available devices or memory under any strategy."""


class TrainingError(UserError):
    """A run that failed for a reason stated in the spec or data (e.g. it kept spiking)."""


def mask_url(url: str) -> str:
    """Return ``url`` with any password replaced by ``***`` so it can be printed."""
    from urllib.parse import urlsplit, urlunsplit

    import re

    # For what urlsplit cannot parse (a non-numeric port, no scheme): hide "user:<this>@".
    fallback = re.sub(r"(://[^:/@]*:)[^@]*@", r"\1***@", url)
    try:
        parts = urlsplit(url)
        if parts.password is None:
            return fallback
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return fallback
    user = parts.username or ""
    host = parts.hostname or ""
    netloc = f"{user}:***@{host}{port}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
