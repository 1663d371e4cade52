"""Names: those that become folder names (sweep names), one validator for the plan and the command
line; and the labels of hyperparameter groups, written and shown by one rule.

A sweep's name is a folder under ``runs_dir`` and a file-name prefix of its report, and it is
printed by ``status`` and ``runs``. So it must be one plain path component: letters, digits,
``_``, ``.`` and ``-``, starting with a letter or digit (so never ``.``, ``..`` or a hidden
name), at most 100 characters. That excludes separators, newlines and terminal escape
sequences. The whole string must match (``fullmatch``: ``$`` would accept a trailing newline).
"""

from __future__ import annotations

import re
from typing import Optional

from scaling.errors import UserError
from scaling.fmt import num, size

NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")
NAME_RULE = "letters, digits, '_', '.' or '-', starting with a letter or digit, at most 100 characters"


class InvalidNameError(UserError, ValueError):
    """A name that cannot safely name a folder or be printed.

    Also a ``ValueError`` so that pydantic validators report it as a validation error.
    """


def name_problem(value: object) -> Optional[str]:
    """Why ``value`` cannot be a sweep name, or None if it can."""
    if not isinstance(value, str):
        return f"must be text, not {type(value).__name__}"
    if NAME_PATTERN.fullmatch(value):
        return None
    return f"{shown(value)} is not a valid name: use {NAME_RULE} (it names a directory)"


def check_name(value: object, what: str = "name") -> str:
    """``value`` if it is a valid name; raises :class:`InvalidNameError` saying ``what`` was wrong."""
    problem = name_problem(value)
    if problem is not None:
        raise InvalidNameError(f"{what}: {problem}")
    return value  # type: ignore[return-value]


def shown(value: str, limit: int = 60) -> str:
    """``value`` quoted for an error message: control characters escaped, long text cut short."""
    text = repr(value[:limit])
    return text + ("..." if len(value) > limit else "")


def printable_problem(value: str) -> Optional[str]:
    """Why a display label (not a folder name) cannot be printed safely, or None.

    Labels may contain spaces and ``/`` but no control characters (newlines, terminal escapes).
    """
    if not value.isprintable():  # any character that is not (one C call)
        return f"{shown(value)} contains control characters (newlines or terminal escapes)"
    return None


# -- hyperparameter groups' labels ------------------------------------------------------------------
#: A size in a group's label (``D=1.99885e+06``, ``N=2.5e+04``): what :func:`group_title` writes as a count.
GROUP_SIZE = re.compile(r"\b([ND])=([0-9][0-9.]*(?:[eE][+-]?[0-9]+)?)")


def group_label(n_layer: int, d_model: int, n_head: int, tokens: float) -> str:
    """The label a plan's group of runs (one point of an lr / batch sweep) is stored with: its shape
    (layers x width x heads) and tokens, ``2x64x2 D=3.2e+06``."""
    return f"{n_layer}x{d_model}x{n_head} D={tokens:.6g}"


def point_label(N: float, D: float, digits: int = 3) -> str:
    """The label of a group that has none stored (a CSV's point whose runs differ in lr, batch or
    beta2): its parameters and tokens, ``N=2.5e+04, D=6.67e+05``, at ``digits`` significant digits."""
    return f"N={num(N, digits)}, D={num(D, digits)}"


def group_title(label: str) -> str:
    """A group's label as shown, its sizes written as counts: "2x16x2 D=1.99885e+06" reads "2x16x2 D=2.0M"."""
    return GROUP_SIZE.sub(lambda m: f"{m.group(1)}={size(float(m.group(2)), 2)}", label)
