"""A CSV's intermediate evaluations: which rows are a run's final evaluation and which are checkpoints.

A file may give a run's checkpoints as rows of their own, with a column ``run`` (the run's name)
and a column ``tokens`` (tokens seen at that evaluation); ``D`` stays the run's total on every
row. A row whose ``tokens`` equals its run's ``D`` (or is empty) is the run's final evaluation:
the loss laws and step 1 of the task laws fit those. Every row is an evaluation step 2 fits
(accuracy from task loss), as a sweep's checkpoints are. Without a ``run`` column ``tokens`` is
another name of ``D`` and every row is a run of its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable

import numpy as np
import pandas as pd

from scaling.errors import FitError
from scaling.fitting.core.tabular import parse_numbers

#: Column names (case-insensitive) of a run's name and of the tokens seen at an evaluation.
RUN_COLUMN = "run"
TOKENS_COLUMN = "tokens"
#: Column names that give a run's total tokens when a file has intermediate evaluations.
TOTAL_COLUMNS = ("D", "d_tokens")
#: Most rows read: a ladder of 100 runs with 1,000 evaluations each is 10^5.
MAX_ROWS = 1_000_000
#: Relative tolerance of "tokens equals D" (a value written with fewer digits than it was computed with).
SAME_TOKENS = 1e-6


@dataclass
class Evaluations:
    """Each row's run, tokens seen and whether it is the run's final evaluation; the final rows alone."""

    run: np.ndarray  # the run's name, per row
    tokens: np.ndarray  # tokens seen at the evaluation, per row
    final: np.ndarray  # bool, per row
    finals: pd.DataFrame  # the final rows, without the run and tokens columns (what the loss laws read)
    final_rows: np.ndarray  # their positions in the file's rows
    runs_without_final: int

    def label_of(self, label: Callable[[int], str]) -> Callable[[int], str]:
        """A row label of the final rows that names the row of the file."""
        return lambda i: label(int(self.final_rows[i]))


def _column(cols: list[str], name: str) -> str | None:
    return next((c for c in cols if c.lower().strip() == name.lower()), None)


def split_evaluations(df: pd.DataFrame, where: str = "", label: Callable[[int], str] | None = None,
                      n_names: tuple[str, ...] = ()) -> Evaluations | None:
    """The rows of ``df`` as evaluations of named runs, or None without a ``run`` column.

    ``n_names``: the names of the parameter-count column (checked the same on a run's rows).

    Refused in one line naming the row: more than :data:`MAX_ROWS` rows, a run without a name, a
    run whose N or D changes between rows, tokens above the run's D, one run given twice at the
    same tokens, an unreadable or non-positive tokens or D, no final evaluation in any run.
    """
    label = label or (lambda i: f"data row {i + 1}")
    cols = [str(c) for c in df.columns]
    run_col = _column(cols, RUN_COLUMN)
    if run_col is None:
        return None
    if len(df) > MAX_ROWS:
        raise FitError(f"{where}{len(df):,} rows, more than the {MAX_ROWS:,} read (evaluations of every run "
                       "together): thin the checkpoints")
    tok_col = _column(cols, TOKENS_COLUMN)
    total_col = next((c for n in TOTAL_COLUMNS if (c := _column(cols, n)) is not None), None)
    if total_col is None:
        raise FitError(f"{where}a file with a {run_col!r} column needs the run's total tokens in a column "
                       f"{' or '.join(repr(n) for n in TOTAL_COLUMNS)} (and the tokens seen at each evaluation in "
                       f"{TOKENS_COLUMN!r})")
    names = df[run_col].astype("string").str.strip()
    empty = (names.isna() | (names == "")).to_numpy()
    if empty.any():
        i = int(np.flatnonzero(empty)[0])
        raise FitError(f"{where}{label(i)}: no run name in column {run_col!r}")
    run = names.to_numpy(dtype=object)

    def numbers(col: str, blank_ok: bool) -> np.ndarray:
        parsed = parse_numbers(df[col])
        v = parsed.values
        bad = parsed.unreadable | (np.isfinite(v) & ~(v > 0)) | np.isinf(v)
        if not blank_ok:
            bad |= np.isnan(v)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise FitError(f"{where}{label(i)}: column {col!r}: {str(df[col].iloc[i])[:40]!r} is not a positive "
                           "number of tokens")
        return v

    D = numbers(total_col, blank_ok=False)
    tokens = D.copy() if tok_col is None else numbers(tok_col, blank_ok=True)
    tokens = np.where(np.isnan(tokens), D, tokens)
    n_col = next((c for n in n_names if (c := _column(cols, n)) is not None), None)
    N = parse_numbers(df[n_col]).values if n_col is not None else None

    _check_runs_own(run, ((D, total_col, "D"), (N, n_col, "N")), where, label)
    above = tokens > D * (1.0 + SAME_TOKENS)
    if above.any():
        i = int(np.flatnonzero(above)[0])
        raise FitError(f"{where}{label(i)}: tokens = {tokens[i]:.6g} is above the run's total D = {D[i]:.6g} "
                       f"(run {run[i]!r})")
    key = pd.Series(list(zip(run, np.round(np.log(tokens) / SAME_TOKENS))))  # equal within the tolerance
    twice = key.duplicated().to_numpy()
    if twice.any():
        i = int(np.flatnonzero(twice)[0])
        j = int(np.flatnonzero((key == key.iloc[i]).to_numpy())[0])
        raise FitError(f"{where}{label(i)}: run {run[i]!r} is given twice at tokens = {tokens[i]:.6g} (also "
                       f"{label(j)}): keep one evaluation per checkpoint")
    final = np.isclose(tokens, D, rtol=SAME_TOKENS, atol=0.0)
    if not final.any():
        raise FitError(f"{where}no run has a final evaluation (a row whose tokens equals its D): the loss laws "
                       "and step 1 fit the final evaluations")
    with_final = set(run[final])
    missing = len(set(run) - with_final)
    drop = [c for c in (run_col, tok_col) if c is not None]
    positions = np.flatnonzero(final)
    finals = df.iloc[positions].drop(columns=drop).reset_index(drop=True)
    return Evaluations(run=run, tokens=tokens, final=final, finals=finals, final_rows=positions,
                       runs_without_final=missing)


def _check_runs_own(run: np.ndarray, own: Iterable[tuple[np.ndarray | None, str | None, str]], where: str,
                    label: Callable[[int], str]) -> None:
    """Refuse a run whose D or N (``own``: (values, column, name) each) changes between its rows."""
    first = pd.Series(np.arange(len(run))).groupby(pd.Series(run), sort=False).transform("min").to_numpy()
    for v, col, what in own:
        if v is None:
            continue
        ref = v[first]
        with np.errstate(invalid="ignore"):
            differs = ~np.isclose(v, ref, rtol=SAME_TOKENS, atol=0.0) & ~(np.isnan(v) & np.isnan(ref))
        if differs.any():
            i = int(np.flatnonzero(differs)[0])
            raise FitError(f"{where}{label(i)}: run {run[i]!r} has {what} = {v[i]:.6g} (column {col!r}) but "
                           f"{ref[i]:.6g} at {label(int(first[i]))}: {what} is the run's own, the same on every row")
