"""Every ``[lo, hi]`` the platform prints is written by :func:`scaling.fmt.bounds` (or by
:class:`scaling.fmt.Interval`, which uses it): no module writes an interval's brackets by hand, so
every interval reads the same (digits, brackets, what a missing bound shows as)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

SCALING = Path(__file__).resolve().parents[1] / "scaling"
#: The one module that writes an interval's brackets.
PRINTER = SCALING / "fmt.py"

#: A value put into a string: an f-string or ``str.format`` field, a %-format, a plotly ``%{...}``.
_FIELD = r"(?:%?\{[^{}\n]*\}|%[-#0-9.]*[sdfge])"
#: Where a string literal may end and the next begin (implicit concatenation or ``+``), across lines.
_JOIN = r"""(?:["']\s*\+?\s*[rbfuRBFU]*["'])?"""
#: Two values in brackets, separated by a comma: an interval written by hand.
HAND_WRITTEN = re.compile(rf"\[{_JOIN}{_FIELD}{_JOIN},\s*{_JOIN}{_FIELD}{_JOIN}\]")


def hand_written(source: str) -> list[tuple[int, str]]:
    """(line, text) of each interval written by hand in ``source``."""
    return [(source.count("\n", 0, m.start()) + 1, m.group(0)) for m in HAND_WRITTEN.finditer(source)]


@pytest.mark.parametrize("line", [
    'f"{v} [{lo:.3g}, {hi:.3g}]"',
    "f\"in [{fit['lo']:.4g}, {fit['hi']:.4g}] (ratio\"",
    'f"reach [{num(lo)}, {num(hi)}]"',
    'f"[{size(lo)}, " f"{size(hi)}]"',
    'f"the interval [{lo:.3g}, "\n        f"{hi:.3g}] spans"',
    '"[%s, %s]" % (lo, hi)',
    '"N* %{y:.4g} [%{customdata[0]:.4g}, %{customdata[1]:.4g}]"',
    '"[{}, {}]".format(lo, hi)',
])
def test_the_check_sees_an_interval_written_by_hand(line: str) -> None:
    assert hand_written(line), line


@pytest.mark.parametrize("line", [
    'f"{v} {bounds(lo, hi)}"',
    'f"values[{i}]"',
    'f"rows {a}, {b}"',
    '"accuracy outside [0, 1]"',
    'f"[{name}]: {why}"',
])
def test_the_check_passes_what_is_no_interval(line: str) -> None:
    assert not hand_written(line), line


def test_no_module_but_fmt_writes_an_intervals_brackets() -> None:
    found = [f"{path.relative_to(SCALING.parent)}:{line}: {text}"
             for path in sorted(SCALING.rglob("*.py")) if path != PRINTER
             for line, text in hand_written(path.read_text(encoding="utf-8"))]
    assert not found, "write these with scaling.fmt.bounds (or fmt.Interval):\n" + "\n".join(found)


def test_bounds_writes_each_end_as_the_number_formatter_does() -> None:
    from scaling.fmt import Interval, bounds, size

    assert bounds(0.00504, 0.00568) == "[0.00504, 0.00568]"
    assert bounds(1.2345e6, 2.5e7, 4) == "[1.234e+06, 2.5e+07]"
    assert bounds(1.2345e6, 2.5e7, fmt=size) == "[1.23M, 25.0M]"
    assert bounds(float("nan"), 1.0) == "[–, 1]"  # a missing end is shown as missing, never as "nan"
    assert Interval(1.5, 1.0, 2.0).text() == "1.5 " + bounds(1.0, 2.0)
