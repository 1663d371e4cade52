"""Errors a user can cause.

The CLI prints a :class:`UserError` as one line on stderr and exits 2. Anything that is not a
``UserError`` is a bug in scaling and keeps its traceback.
"""

from __future__ import annotations

import re
from typing import Any


class UserError(Exception):
    """Something the user can fix: bad input, a missing file, an unreachable service."""

    exit_code = 2

    def one_line(self) -> str:
        """The message on one line, as the CLI prints it."""
        text = mask_text(" ".join(str(self).split()))
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


class ArgumentError(UserError, ValueError):
    """An argument of the notebook API that no call can use (a string, NaN, zero, a negative size...)."""


class FitError(UserError):
    """Data that cannot support the requested fit (too few points, one size, bad losses)."""


class ResourceError(UserError):
    """A run that cannot fit the available devices or memory under any strategy, or a Ray cluster it
    cannot join."""


class TrainingError(UserError):
    """A run that failed for a reason stated in the spec or data (e.g. it kept spiking)."""


# -- one line from a validation error -----------------------------------------------------


class FieldProblem:
    """The problem a pydantic ``ValidationError`` shows a user: the first error (an unknown field
    first where asked: a misspelt key also makes the real one missing), its message without
    pydantic's "Value error, " prefix (the validators name their fields). Duck-typed, so this leaf
    imports no pydantic."""

    def __init__(self, exc: Any, *, unknown_first: bool = False) -> None:
        errors = exc.errors()
        err = errors[0]
        if unknown_first:
            err = next((e for e in errors if e["type"] == "extra_forbidden"), err)
        self.loc: tuple[Any, ...] = tuple(err["loc"])
        self.kind: str = str(err["type"])
        self.message: str = str(err["msg"]).removeprefix("Value error, ")
        self.value: Any = err.get("input")

    @property
    def path(self) -> str:
        """The field's dotted location ("" for a check across fields)."""
        return ".".join(str(p) for p in self.loc)


# -- masking: secrets never leave their URL ------------------------------------------------


MASK = "***"
_SCHEME = r"[A-Za-z][A-Za-z0-9+.\-]*://"
_USERINFO_START = re.compile(r"((?:[A-Za-z][A-Za-z0-9+.\-]*)?://)([^:/@?#]*):")  # the scheme may be missing
_URL_IN_TEXT = re.compile(_SCHEME + r"[^\s'\"<>]*")
_QUERY_SECRET = re.compile(r"([?&;][^=&#]*(?:password|passwd|pwd|passphrase|secret|token)[^=&#]*=)[^&#]*",
                           re.IGNORECASE)
_TEXT_SECRET = re.compile(r"(\b(?:\w*password|passwd|pwd|passphrase)\s*=\s*)(['\"]?)[^\s'\",;&]+", re.IGNORECASE)
_SECRET_KEYS = {"password", "passwd", "pwd", "passphrase", "secret", "token", "api_key"}
# A host name never holds "@": "x@host" in a driver's message is the tail of a password whose
# "@" was not percent-encoded, cut off by the URL parser.
_USERINFO_TAIL = re.compile(r"(['\"])[^'\"\s]*@(?=[^'\"\s]*['\"])")
_AT_BEFORE_HOST = re.compile(r"@(?=[A-Za-z0-9.\-_%\[\]:]*(?:[/?#]|$))")
_MIN_SECRET = 4  # shorter remembered fragments would mask ordinary words
_remembered: set[str] = set()


def _userinfo_end(url: str, start: int) -> int:
    """Where the password that begins at ``start`` ends: the "@" before the host (-1 without one).

    A host never holds "@", but an unencoded password may hold "@", "?", "#" or "/": the end is
    the last "@" that a plausible host follows (up to "/", "?", "#" or the end). An "@" in the
    query may be taken for it, hiding the host too: masking too much beats printing a password.
    """
    ends = [m.start() for m in _AT_BEFORE_HOST.finditer(url, start)]
    return ends[-1] if ends else url.rfind("@", start)


def _secrets_of(url: str) -> set[str]:
    """The password of ``url`` as any parser might cut it (every "@"-separated piece)."""
    from urllib.parse import unquote

    found: set[str] = set()
    m = _USERINFO_START.match(url)
    if m:
        at = _userinfo_end(url, m.end())
        if at > m.end():
            found.add(url[m.end() : at])
    for q in _QUERY_SECRET.finditer(url):
        value = url[q.end(1) : q.end()]
        if value:
            found.add(value)
    pieces = {p for s in found for p in (s, unquote(s), *s.split("@"), *unquote(s).split("@"))}
    return {p for p in pieces if len(p) >= _MIN_SECRET}


def mask_url(url: str) -> str:
    """``url`` with every password (user-info, ``?password=``; "@" encoded or not) as ``***``.

    The passwords seen are remembered for the life of the process, so :func:`mask_text` also
    hides them where a driver repeats them in its own words."""
    _remembered.update(_secrets_of(url))
    out = url
    m = _USERINFO_START.match(url)
    if m:
        at = _userinfo_end(url, m.end())
        if at >= m.end():
            out = url[: m.end()] + MASK + url[at:]
    return _QUERY_SECRET.sub(lambda q: q.group(1) + MASK, out)


def mask_text(text: str) -> str:
    """``text`` (a message, a driver's error) with every URL's password and known secret masked."""
    text = _URL_IN_TEXT.sub(lambda m: mask_url(m.group()), text)
    text = _TEXT_SECRET.sub(lambda m: m.group(1) + m.group(2) + MASK, text)
    text = _USERINFO_TAIL.sub(lambda m: m.group(1) + MASK + "@", text)
    for secret in sorted(_remembered, key=len, reverse=True):
        text = text.replace(secret, MASK)
    return text


def mask_data(obj: object) -> Any:
    """A copy of ``obj`` (a plan as JSON data) fit to store or render: every string masked, and
    the value of any key that names a secret replaced."""
    if isinstance(obj, dict):
        return {
            k: MASK if isinstance(k, str) and k.lower() in _SECRET_KEYS and v else mask_data(v)
            for k, v in obj.items()
        }
    if isinstance(obj, (list, tuple)):
        return [mask_data(v) for v in obj]
    if isinstance(obj, str):
        # a value that is a URL is masked whole: its password may hold a space, which ends a URL in text
        return mask_text(mask_url(obj) if re.match(_SCHEME, obj) else obj)
    return obj
