"""Reading a measurements CSV a user hands us: bounded size, delimiter sniffed, numbers parsed strictly.

A CSV is untrusted text. Its size is capped before pandas sees it; the delimiter is taken from
the header line (comma, semicolon, tab or bar), so a semicolon-separated file is read as one;
every number column is parsed by :func:`parse_numbers`, which accepts what people write for
sizes (``1e9``, ``1,000,000``, ``1_000_000``, ``10M``, ``1.5B``) and reports, per cell, what it
could not read instead of turning it into NaN silently.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from scaling.errors import FitError, NotFoundError
from scaling.userfiles import input_file

#: Largest CSV read (bytes): ten million rows of four numbers fit comfortably below it.
MAX_CSV_BYTES = 1 << 30
#: Most columns a CSV may have: N, D, C, loss, seeds and descriptions of a run are a dozen; every
#: column not recognised becomes a grouping key, so thousands of them make the read crawl.
MAX_CSV_COLUMNS = 256
#: Delimiters tried on the header line, in order of preference on a tie.
DELIMITERS = (",", ";", "\t", "|")
#: Size suffixes: thousand, million, billion (B and G), trillion.
SUFFIXES = {"k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}
ACCEPTED = "accepted: 1e9, 1000000, 1,000,000, 1_000_000 or a suffix K, M, B, T as in 10M"

_NUMBER = re.compile(
    r"^(?P<num>[+-]?(?:\d{1,3}(?:,\d{3})+|\d{1,3}(?:_\d{3})+|\d+)?(?:\.\d+)?(?:[eE][+-]?\d+)?)\s*(?P<suf>[kKmMbBgGtT])?$"
)
_MISSING = {"", "nan", "na", "n/a", "none", "null", "-"}


@dataclass
class Parsed:
    """One column's values (NaN where unreadable or missing) and which cells could not be read."""

    values: np.ndarray
    unreadable: np.ndarray  # bool: text that is not a number (as opposed to an empty cell)
    text: pd.Series | None  # the raw cells, for messages (None when the column was numeric already)


def read_csv(path: str | Path) -> tuple[pd.DataFrame, str]:
    """The CSV as a DataFrame of raw cells, and the delimiter it used."""
    p, _ = input_file(path, "CSV", error=FitError, missing=NotFoundError, max_bytes=MAX_CSV_BYTES)
    head = _header_line(p)
    sep = delimiter_of(head)
    n_columns = head.count(sep) + 1
    if n_columns > MAX_CSV_COLUMNS:
        raise FitError(f"{p}: the header has {n_columns:,} columns, more than the {MAX_CSV_COLUMNS} a CSV may have")
    try:
        # The C parser infers float columns itself (fast for a million rows); other columns stay text.
        df = pd.read_csv(p, sep=sep, engine="c", skipinitialspace=True, low_memory=False,
                         decimal="," if sep == ";" else ".", encoding_errors="replace")
    except pd.errors.EmptyDataError:
        raise FitError(f"{p}: the file is empty (no header line)") from None
    except Exception as exc:  # pandas raises several parser errors
        msg = " ".join(str(exc).split())[:200]
        raise FitError(f"{p}: cannot read as CSV ({exc.__class__.__name__}: {msg})") from None
    if not isinstance(df.index, pd.RangeIndex):  # pandas takes a first row's surplus fields for an index
        raise FitError(f"{p}: data row 1 has more fields than the header's {len(df.columns)}")
    names = [c.strip().strip('"').strip() for c in head.split(sep)]
    lower = [c.lower() for c in names]
    twice = sorted({c for c in names if c and lower.count(c.lower()) > 1})
    if twice:  # pandas would rename the second one (loss.1) and read it as a description of the run
        raise FitError(f"{p}: the header names column(s) {', '.join(repr(c) for c in twice)} more than once")
    df.columns = [str(c).strip() for c in df.columns]
    return df, sep


def _header_line(path: Path) -> str:
    with open(path, "rb") as fh:
        return fh.readline(1 << 20).decode("utf-8", errors="replace")


def delimiter_of(head: str) -> str:
    """The delimiter occurring most often in the header line ``head`` (comma when none does)."""
    counts = {d: head.count(d) for d in DELIMITERS}
    best = max(DELIMITERS, key=lambda d: counts[d])
    return best if counts[best] else ","


def parse_numbers(col: pd.Series) -> Parsed:
    """Numbers of a column: numeric dtypes as they are, text through :data:`_NUMBER`."""
    if pd.api.types.is_bool_dtype(col):
        text = col.astype(str)
        return Parsed(np.full(len(col), np.nan), np.ones(len(col), bool), text)
    if pd.api.types.is_numeric_dtype(col):
        return Parsed(col.to_numpy(dtype=float, na_value=np.nan), np.zeros(len(col), bool), None)
    text = col.astype("string").str.strip()
    values = pd.to_numeric(text, errors="coerce").to_numpy(dtype=float, na_value=np.nan)
    missing = text.isna().to_numpy() | text.str.lower().isin(_MISSING).fillna(True).to_numpy(dtype=bool)
    todo = np.flatnonzero(np.isnan(values) & ~missing & ~text.str.lower().isin(["nan"]).fillna(False).to_numpy(bool))
    unreadable = np.zeros(len(col), bool)
    for i in todo:  # only the cells plain parsing refused: suffixes, thousands separators, junk
        v = _parse_one(str(text.iloc[i]))
        if v is None:
            unreadable[i] = True
        else:
            values[i] = v
    return Parsed(values, unreadable, text)


def _parse_one(cell: str) -> float | None:
    m = _NUMBER.match(cell)
    if m is None or not any(ch.isdigit() for ch in m.group("num")):
        return None
    try:
        v = float(m.group("num").replace(",", "").replace("_", ""))
    except ValueError:
        return None
    suf = m.group("suf")
    return v * SUFFIXES[suf.lower()] if suf else v
