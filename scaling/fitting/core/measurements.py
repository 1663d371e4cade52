"""Fitting input: one tidy DataFrame of points ``N, D, C, loss`` (+ optional curves).

Sources are the database (a sweep's completed runs) and CSV files of anyone's measurements.
Whatever the source, :func:`prepare` validates the numbers, fills C or D from the other with the
FLOP convention, averages repeated seeds per (N, D) and keeps their spread as the point's noise.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd

from scaling.accounting import FLOPS_PER_PARAM_TOKEN
from scaling.errors import FitError
from scaling.naming import printable_problem
from scaling.rules import HPARAM_CHECKS
from scaling.fitting.core.notes import Note, NoteKind
from scaling.fitting.core.points import point_keys
from scaling.fitting.core.tabular import ACCEPTED, parse_numbers, read_csv
from scaling.fitting.tasks.task_columns import is_task_column
from scaling.fitting.tasks.task_evaluations import split_evaluations

#: CSV column aliases (case-insensitive), first match wins.
ALIASES: dict[str, tuple[str, ...]] = {
    "N": ("N", "params", "n_params", "Model Size", "parameters"),
    "D": ("D", "tokens", "d_tokens"),
    "C": ("C", "flops", "compute", "compute_flops", "Training FLOP"),
    "loss": ("loss", "final_loss", "eval_loss"),
    "seed": ("seed",),
    "unique_tokens": ("unique_tokens", "U"),
    # hyperparameters (scaling.fitting.hyperparams.hparams): runs of one (N, D) that differ in these form a group
    "lr": ("lr", "learning_rate", "lr_peak", "peak_lr"),
    "batch": ("batch_tokens", "batch_size_tokens", "batch"),
    "beta2": ("beta2", "adam_beta2"),
    "group": ("group", "hparam_group"),
}

#: Loss columns in other units, recognised by name: their unit is implied.
LOSS_UNIT_ALIASES: dict[str, tuple[str, ...]] = {
    "perplexity": ("perplexity", "ppl", "eval_ppl", "val_ppl"),
    "bits": ("bits_per_byte", "bpb", "bits_per_char", "bpc", "loss_bits"),
}
LOSS_UNITS = ("nats", "bits", "perplexity")
#: Columns describing the loss another way; not a description of the run, so not a grouping key.
LOSS_LIKE = frozenset(n for names in LOSS_UNIT_ALIASES.values() for n in names) | {"loss_std", "n_seeds"}
#: A loss in nats above this is almost surely perplexity (ln of a 10^8-token vocabulary is 18.4).
PERPLEXITY_LIKE = 20.0
#: FLOP conventions a CSV may declare: 6ND, or C as given (k = the data's median C/(ND)).
FLOPS_CHOICES = ("6N", "given", "6N_attention")
#: Values accepted for N, D, C, loss and U: beyond these, products such as 6ND overflow.
VALUE_RANGE = (1e-100, 1e100)
#: Largest N that is surely not a parameter count (a column in millions or billions).
N_IN_UNITS = 1e3

#: Losses whose range is below this fraction of the largest do not vary beyond what a training run
#: resolves (bf16 alone rounds at about 4e-3): there is no dependence on N, D or C to fit.
MIN_LOSS_SPREAD = 1e-4
#: Relative disagreement of C with k N D tolerated before a warning.
FLOPS_TOLERANCE = 0.05

#: Training FLOPs per parameter per token in the 6ND convention (Kaplan et al. 2020, Sec. 2.1).

#: Muennighoff et al. (2023), eq. 5: repeated data decays in value with this many epochs' scale.
R_STAR_DATA = 15.4


@dataclass
class FitData:
    """Averaged points plus what a fit needs to know about where they came from.

    ``points`` columns: N, D, C, loss, loss_std (spread over seeds, NaN for one seed), n_seeds.
    ``curves`` (optional) columns: run_key, N, tokens, flops, loss.
    ``flops_per_param_token`` is k in C = k N D (6 for the 6ND convention; the median ratio of
    the data otherwise), used to map a budget to (N, D) and back.
    """

    points: pd.DataFrame
    curves: pd.DataFrame | None = None
    params_convention: str = "non_embedding"
    flops_convention: str = "6N"
    flops_per_param_token: float = FLOPS_PER_PARAM_TOKEN
    source: str = ""
    unique_tokens: float | None = None
    notes: list[str] = field(default_factory=list)
    #: Runs whose final loss is predicted (they stopped early), not measured; its note is among ``notes``.
    predicted_finals: int = 0
    predicted_note: str = ""
    #: Points whose loss another law predicted (trunks' cooldowns): their (N, D) (points x 2) and that law's
    #: bootstrap replicates of their losses (replicates x points), which the laws' bootstraps carry in
    #: (:mod:`scaling.fitting.core.predicted`).
    predicted_draws: tuple[np.ndarray, np.ndarray] | None = None
    #: Column of per-row unique tokens U when the data had one (D is then D' per row).
    unique_tokens_column: str | None = None
    #: Whether D is effective data that differs from the raw D somewhere.
    effective_data: bool | None = None
    #: Muennighoff et al.'s R*_D used for D'.
    r_star: float = R_STAR_DATA
    #: Muennighoff et al.'s R*_N used for effective parameters N' (None: not modelled, N' = N).
    r_star_n: float | None = None
    #: Each estimated R* ("R*_D", "R*_N"): value, status and 95% profile interval (scaling.fitting.loss.effective).
    r_star_fits: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: What the input looked wrong in (units, conventions, dropped rows): shown as warnings.
    warnings: list[str] = field(default_factory=list)
    #: The runs with lr, batch (and beta2, group) when they form hyperparameter groups
    #: (scaling.fitting.hyperparams.hparams); ``points`` then hold one row per group, as ``hparam_mode`` says.
    hparam_runs: pd.DataFrame | None = None
    hparam_mode: str | None = None
    #: How a table's rows were read (:func:`from_frame`), so its task columns are read alike.
    loss_units: str | None = None
    drop_invalid: bool = False

    def conventions(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "params": self.params_convention,
            "flops": self.flops_convention,
            "flops_per_param_token": self.flops_per_param_token,
            "effective_data": self.unique_tokens is not None if self.effective_data is None else self.effective_data,
            "unique_tokens": self.unique_tokens,
        }
        if self.unique_tokens_column is not None:
            out["unique_tokens_column"] = self.unique_tokens_column
        if self.r_star != R_STAR_DATA:
            out["r_star_D"] = self.r_star
        if self.r_star_n is not None:
            out["r_star_N"] = self.r_star_n
        if self.r_star_fits:
            out["r_star_fits"] = self.r_star_fits
        if self.hparam_mode:
            out["hparams"] = self.hparam_mode
        return out

    def fingerprint(self) -> str:
        """A stable hash of the averaged points and conventions: equal data, equal fingerprint."""
        pts = self.points[["N", "D", "C", "loss"]].sort_values(["N", "D"]).to_numpy()
        payload = {
            "points": [[float(f"{v:.12g}") for v in row] for row in pts],
            "conventions": self.conventions(),
        }
        if self.curves is not None and len(self.curves):
            cur = self.curves[["N", "flops", "loss"]].sort_values(["N", "flops"]).to_numpy()
            payload["curves"] = hashlib.sha256(np.ascontiguousarray(cur.round(12)).tobytes()).hexdigest()
        if self.predicted_draws is not None:  # a fit that carries them in differs from one that does not
            payload["predicted_draws"] = hashlib.sha256(np.ascontiguousarray(self.predicted_draws[1].round(12))
                                                        .tobytes()).hexdigest()
        text = json.dumps(payload, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:32]


def effective_tokens(D: np.ndarray | float, unique_tokens: np.ndarray | float,
                     r_star: float = R_STAR_DATA) -> np.ndarray:
    """Muennighoff et al. (2023) effective data D' = U + U R* (1 - exp(-R/R*)), R = D/U - 1.

    Tokens beyond one pass over the U unique tokens are worth less and less; D <= U is unchanged.
    ``unique_tokens`` is one U for every D or one per D (a column of U).
    """
    D = np.asarray(D, dtype=float)
    U = np.asarray(unique_tokens, dtype=float)
    if not (np.all(U > 0) and np.all(np.isfinite(U))):
        raise FitError(f"unique_tokens must be positive and finite, got {unique_tokens}")
    if not (r_star > 0 and math.isfinite(r_star)):
        raise FitError(f"R* must be positive and finite, got {r_star}")
    R = np.maximum(D / U - 1.0, 0.0)
    return np.where(D <= U, D, U + U * r_star * (1.0 - np.exp(-R / r_star)))


def _pick(columns: list[str], names: tuple[str, ...]) -> str | None:
    lower = {c.lower().strip(): c for c in columns}
    for name in names:
        if name.lower() in lower:
            return lower[name.lower()]
    return None


def _refuse_ambiguous(columns: list[str], where: str) -> None:
    """Two columns that both name one quantity (N and params; loss and eval_loss) leave which one is
    meant to a guess: refused, not resolved silently by the alias order."""
    for key, names in ALIASES.items():
        wanted = {n.lower() for n in names}
        if key == "loss":
            wanted |= {n.lower() for unit in LOSS_UNIT_ALIASES.values() for n in unit}
        hits = [c for c in columns if c.lower().strip() in wanted]
        if len(hits) > 1:
            evaluations = (" (or, for evaluations during a run, name each row's run in a column 'run': tokens is "
                           "then the tokens seen at that evaluation)" if key == "D" else "")
            raise FitError(f"{where}columns {', '.join(repr(c) for c in hits)} all give {key}: keep one "
                           f"(or rename the others) so that it is clear which is meant{evaluations}")


# -- reading a table's rows, one step at a time ------------------------------------------------------
@dataclass(frozen=True)
class Columns:
    """Which column gives each quantity of :data:`ALIASES` (None: none does) and the loss's unit."""

    picked: dict[str, str | None]
    loss_units: str


@dataclass
class Rows:
    """A table's rows as numbers: ``values`` (the kept rows; N, D, C, loss in nats, and any of
    unique_tokens, lr, batch, beta2 the table gives), which rows were kept, and what was noticed."""

    values: pd.DataFrame
    keep: np.ndarray
    columns: Columns
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def check_options(flops_convention: str, params_convention: str, loss_units: str | None) -> None:
    """Refuse an unknown FLOP convention, parameter convention or loss unit."""
    from scaling.accounting import PARAMS_CONVENTIONS

    if flops_convention not in FLOPS_CHOICES:
        raise FitError(f"unknown FLOP convention {flops_convention!r} (use one of {', '.join(FLOPS_CHOICES)})")
    if params_convention not in PARAMS_CONVENTIONS:
        raise FitError(f"unknown parameter convention {params_convention!r} "
                       f"(use one of {', '.join(PARAMS_CONVENTIONS)})")
    if loss_units is not None and loss_units not in LOSS_UNITS:
        raise FitError(f"unknown loss units {loss_units!r} (use one of {', '.join(LOSS_UNITS)})")


def choose_columns(cols: list[str], where: str = "", loss_units: str | None = None) -> Columns:
    """The column of each quantity (aliases in :data:`ALIASES`, case-insensitive): two columns for one
    quantity, or no N, no loss, or neither D nor C, is refused in one line."""
    _refuse_ambiguous(cols, where)
    picked = {key: _pick(cols, names) for key, names in ALIASES.items()}
    if picked["lr"] is None and picked["batch"] is None:  # beta2 or a group alone: descriptions, not groups
        picked["beta2"] = picked["group"] = None
    units = loss_units or "nats"
    if picked["loss"] is None:
        for unit, names in LOSS_UNIT_ALIASES.items():
            if (col := _pick(cols, names)) is not None:
                picked["loss"], units = col, loss_units or unit
                break
    missing = _missing_columns(picked)
    if missing:
        found = ", ".join(repr(c) for c in cols[:20]) + (f" and {len(cols) - 20} more" if len(cols) > 20 else "")
        hint = ""
        if len(cols) == 1 and any(d in cols[0] for d in ";\t|,"):
            hint = " (one column whose name holds a delimiter: is the file separated by something else?)"
        raise FitError(f"{where}{missing}; columns found: {found or 'none'}{hint}")
    return Columns(picked, units)


def _column_problems(key: str, v: np.ndarray, unreadable: np.ndarray) -> tuple[np.ndarray, np.ndarray, str]:
    """(invalid: missing, non-finite or non-positive; outside: a readable value the quantity cannot
    take; why it cannot) for one numeric column."""
    with np.errstate(invalid="ignore"):
        if key in ("beta2", "lr"):  # the plan's rule: 0 is a valid beta2 (1.5 is not), an lr above 100 is not
            allowed, why = HPARAM_CHECKS[key]
            ruled = np.array([bool(allowed(float(x))) if math.isfinite(x) else True for x in v], dtype=bool)
            if key == "lr":  # a missing or non-positive lr is named as the other columns' are
                invalid = ~np.isfinite(v) | (v <= 0)
            else:
                invalid = ~np.isfinite(v) & ~unreadable
            return invalid, np.isfinite(v) & ~invalid & ~ruled, why
        invalid = ~np.isfinite(v) | (v <= 0)
        return invalid, ~invalid & ((v > VALUE_RANGE[1]) | (v < VALUE_RANGE[0])), \
            f"outside {VALUE_RANGE[0]:g} to {VALUE_RANGE[1]:g}"


def check_values(df: pd.DataFrame, columns: Columns, *, where: str = "", label: Callable[[int], str] | None = None,
                 drop_invalid: bool = False, blank_loss: np.ndarray | None = None
                 ) -> tuple[dict[str, np.ndarray], np.ndarray, list[str]]:
    """Each numeric quantity's values parsed (:func:`~scaling.fitting.core.tabular.parse_numbers`) and checked.

    A missing, unreadable, non-positive or non-finite value, one outside :data:`VALUE_RANGE`, or an lr
    or beta2 the plan's rule refuses (:data:`scaling.rules.HPARAM_CHECKS`) is refused in one line
    naming its row, or with ``drop_invalid`` its row is dropped and counted. ``blank_loss``: rows whose
    loss may be empty (kept, NaN). Returns (values of every row, rows kept, warnings).
    """
    label = label or (lambda i: f"row {i}")
    picked = columns.picked
    numeric = [k for k in ("N", "D", "C", "loss", "unique_tokens", "lr", "batch", "beta2") if picked[k] is not None]
    values: dict[str, np.ndarray] = {}
    bad_rows = np.zeros(len(df), bool)
    first_problem: dict[str, tuple[int, str]] = {}
    for key in numeric:
        col = picked[key]
        name = "U" if key == "unique_tokens" else key
        parsed = parse_numbers(df[col])
        v = parsed.values
        values[key] = v

        def problem(mask: np.ndarray, message: Callable[[int], str], what: Callable[[int], str]) -> None:
            """Refuse the first row in ``mask`` (one line naming it), or remember it when dropping such rows."""
            i = int(np.flatnonzero(mask)[0])
            if not drop_invalid:
                raise FitError(f"{where}{message(i)}")
            first_problem.setdefault(key, (i, what(i)))

        def number(i: int) -> str:
            return f"{col}={float(v[i])!r}"

        invalid, outside, why = _column_problems(key, v, parsed.unreadable)
        if key == "loss" and blank_loss is not None:
            invalid &= ~(blank_loss & np.isnan(v) & ~parsed.unreadable)
        if outside.any() and not parsed.unreadable.any() and (key in ("beta2", "lr") or not invalid.any()):
            if key in ("beta2", "lr"):
                problem(outside, lambda i: f"{int(outside.sum())} point(s) with an impossible {name} (first: "
                        f"{label(i)}, {name}={float(v[i])!r}; column {col!r}): {why} (--drop-invalid drops such "
                        "rows)", number)
            else:
                problem(outside, lambda i: f"{int(outside.sum())} point(s) with {name} {why} (first: {label(i)}, "
                        f"{name}={float(v[i])!r}; column {col!r}; --drop-invalid drops such rows)", number)
        invalid |= outside
        if parsed.unreadable.any():
            def cell(i: int) -> str:
                return str(parsed.text.iloc[i])[:40] if parsed.text is not None else ""

            problem(parsed.unreadable, lambda i: f"column {col!r}, {label(i)}: cannot read {cell(i)!r} as a number "
                    f"({ACCEPTED}); {int(parsed.unreadable.sum())} such cell(s) (--drop-invalid drops such rows)",
                    lambda i: f"{col}={cell(i)!r}")
        elif (invalid & ~outside).any():
            kind = "non-finite" if key == "beta2" else "non-positive or non-finite"  # 0 is a valid beta2
            problem(invalid & ~outside, lambda i: f"{int(invalid.sum())} point(s) with {kind} "
                    f"{name} (first: {label(i)}, {name}={float(v[i])!r}; column {col!r}; "
                    "--drop-invalid drops such rows)", number)
        bad_rows |= invalid
    keep = ~bad_rows
    warnings: list[str] = []
    if bad_rows.any():
        i, what = min(first_problem.values())
        warnings.append(f"dropped {int(bad_rows.sum())} of {len(df)} rows with a missing, unreadable, out-of-range, "
                        f"non-positive or non-finite value (first: {label(i)}, {what})")
        if not keep.any():
            raise FitError(f"{where}no valid rows left to fit: every one of the {len(df)} rows has an invalid value")
    return values, keep, warnings


def convert_units(out: pd.DataFrame, columns: Columns, where: str = "") -> tuple[list[str], list[str]]:
    """The loss in nats (from bits or perplexity, in place); warnings for an N that looks like it is
    in millions and a loss that looks like perplexity or bits. Returns (notes, warnings)."""
    picked, units = columns.picked, columns.loss_units
    notes: list[str] = []
    warnings: list[str] = []
    if float(out["N"].max()) < N_IN_UNITS:
        warnings.append(f"column {picked['N']!r}: the largest N is {float(out['N'].max()):.4g} parameters: if N is "
                        "in millions or billions, write it out (4e8, 400M)")
    # Units of the loss: a language model's loss in nats stays below ln(vocabulary) ~ 12.
    if units == "bits":
        out["loss"] = out["loss"] * math.log(2.0)
        notes.append(f"loss column {picked['loss']!r} is in bits: converted to nats (x ln 2)")
    elif units == "perplexity":
        if (out["loss"] < 1.0).any():
            raise FitError(f"{where}perplexity below 1 in column {picked['loss']!r}: these are not perplexities")
        out["loss"] = np.log(out["loss"])
        notes.append(f"loss column {picked['loss']!r} is perplexity: fitted as its logarithm (loss in nats)")
        if not (out["loss"].isna() | (out["loss"] > 0)).all():
            raise FitError(f"{where}a perplexity of exactly 1 is a loss of 0, which no power law with E > 0 fits")
    top = float(out["loss"].max())
    if top > PERPLEXITY_LIKE:
        warnings.append(f"loss reaches {top:.4g}, above what a loss in nats is (< ~{PERPLEXITY_LIKE:g}): if the "
                        "column is perplexity, pass --loss-units perplexity")
    if units == "nats" and any(t in str(picked["loss"]).lower() for t in ("bit", "bpb", "bpc")):
        warnings.append(f"loss column {picked['loss']!r} looks like bits: pass --loss-units bits to convert to nats")
    return notes, warnings


def apply_conventions(out: pd.DataFrame, columns: Columns, *, flops_convention: str = "6N",
                      params_convention: str = "non_embedding", where: str = "",
                      source: str = "frame") -> tuple[list[str], list[str]]:
    """D or C derived from the other where the table lacks one (C = 6ND; only under the 6N convention),
    and a given C checked against the convention, in place. Returns (notes, warnings)."""
    picked = columns.picked
    notes: list[str] = []
    warnings: list[str] = []
    k = FLOPS_PER_PARAM_TOKEN if flops_convention == "6N" else None
    if "D" not in out:
        if k is None:
            raise FitError(f"{where}tokens can only be derived from FLOPs under the 6N convention")
        out["D"] = out["C"] / (k * out["N"])
    if "C" not in out:
        if k is None:
            raise FitError(f"{where}FLOPs can only be derived from tokens under the 6N convention "
                           f"(--flops {flops_convention} needs a FLOPs column)")
        out["C"] = k * out["N"] * out["D"]
    elif picked["D"] is not None:
        warnings.extend(_flops_warnings(out, flops_convention, str(picked["C"])))
    if params_convention == "non_embedding" and flops_convention == "6N" and source != "frame":
        notes.append("conventions assumed: N counts non-embedding parameters and C = 6ND "
                     "(--params total, --flops given if the data differ)")
    return notes, warnings


def read_rows(df: pd.DataFrame, *, flops_convention: str = "6N", params_convention: str = "non_embedding",
              loss_units: str | None = None, drop_invalid: bool = False, where: str = "", source: str = "frame",
              label: Callable[[int], str] | None = None, blank_loss: np.ndarray | None = None) -> Rows:
    """A table's N, D, C and loss (and U, lr, batch, beta2): :func:`choose_columns`, :func:`check_values`,
    :func:`convert_units`, :func:`apply_conventions`. The one reading of a measurements table's
    numbers, shared by the loss fits (:func:`from_frame`) and the task columns
    (:func:`scaling.fitting.tasks.task_data.from_frame`)."""
    check_options(flops_convention, params_convention, loss_units)
    columns = choose_columns([str(c) for c in df.columns], where, loss_units)
    values, keep, warnings = check_values(df, columns, where=where, label=label, drop_invalid=drop_invalid,
                                          blank_loss=blank_loss)
    out = pd.DataFrame({k: v[keep] for k, v in values.items()})
    notes, more = convert_units(out, columns, where)
    warnings += more
    conv_notes, more = apply_conventions(out, columns, flops_convention=flops_convention,
                                         params_convention=params_convention, where=where, source=source)
    return Rows(out, keep, columns, notes + conv_notes, warnings + more)


def from_frame(
    df: pd.DataFrame,
    *,
    flops_convention: str = "6N",
    params_convention: str = "non_embedding",
    source: str = "frame",
    unique_tokens: float | None = None,
    curves: pd.DataFrame | None = None,
    loss_units: str | None = None,
    drop_invalid: bool = False,
    r_star: float = R_STAR_DATA,
    row_label: Callable[[int], str] | None = None,
    hparams: str = "tuned",
) -> FitData:
    """Map aliased columns to N, D, C, loss (and U), check and convert them (:func:`read_rows`), then :func:`prepare`.

    ``flops_convention``: ``6N`` (C = 6ND; a C column that disagrees is warned about), or
    ``given`` / ``6N_attention`` (C as the data give it; k in C = k N D is their median ratio).
    ``loss_units``: nats (default), bits or perplexity; a ppl/bits column implies its unit.
    ``drop_invalid``: rows with a missing, unreadable, non-positive or non-finite value are
    dropped and counted instead of refused. A U (unique tokens) column makes D Muennighoff et
    al.'s effective data per row, with R*_D = ``r_star``. Columns of lr and batch make the rows
    of one (N, D) that differ in them a group (:mod:`scaling.fitting.hyperparams.hparams`); ``hparams``:
    the loss laws see each group's tuned loss (``tuned``) or its grid's centre (``fixed``). A ``run``
    column makes rows evaluations of named runs: only each run's final one is read here
    (:mod:`scaling.fitting.tasks.task_evaluations`).
    """
    where = f"{source}: " if source else ""
    label = row_label or (lambda i: f"row {i}")
    check_options(flops_convention, params_convention, loss_units)
    evaluations = split_evaluations(df, where, label, ALIASES["N"])  # a run's checkpoints: the loss laws read its final row
    if evaluations is not None:
        df, label = evaluations.finals, evaluations.label_of(label)
    cols = [str(c) for c in df.columns]
    df = df.set_axis(cols, axis=1)
    picked = choose_columns(cols, where, loss_units).picked
    if unique_tokens is not None and picked["unique_tokens"] is not None:
        raise FitError(f"{where}give the unique tokens either as column {picked['unique_tokens']!r} or as "
                       "--unique-tokens, not both")
    rows = read_rows(df, flops_convention=flops_convention, params_convention=params_convention,
                     loss_units=loss_units, drop_invalid=drop_invalid, where=where, source=source, label=label)
    out, keep = rows.values, rows.keep
    if picked["seed"] is not None:
        out["seed"] = df[picked["seed"]].to_numpy()[keep]
    if picked["unique_tokens"] is not None:
        out["U"] = out.pop("unique_tokens")
    # task measurements (scaling.fitting.tasks.task_laws) are results, not descriptions of the run
    extras = [c for c in cols if c not in picked.values() and c not in LOSS_LIKE and not is_task_column(c)]
    for c in extras:
        out[f"extra:{c}"] = df[c].to_numpy()[keep]
    notes = list(rows.notes)
    hparam_runs = None
    if picked["lr"] is not None or picked["batch"] is not None:
        out, hparam_runs, hp_notes = _hparam_points(out, df, picked, keep, hparams, where, label)
        notes.extend(hp_notes)
    data = prepare(
        out,
        flops_convention=flops_convention,
        params_convention=params_convention,
        source=source,
        unique_tokens=unique_tokens,
        curves=curves,
        r_star=r_star,
        unique_tokens_column=picked["unique_tokens"],
    )
    data.notes[:0] = [Note(NoteKind.WARNING, f"warning: {w}") for w in rows.warnings] + notes
    data.warnings[:0] = rows.warnings
    data.loss_units, data.drop_invalid = loss_units, drop_invalid
    if hparam_runs is not None:
        data.hparam_runs, data.hparam_mode = hparam_runs, hparams
    return data


def _hparam_points(out: pd.DataFrame, df: pd.DataFrame, picked: dict[str, str | None], keep: np.ndarray,
                   mode: str, where: str, label: Callable[[int], str]) -> tuple[pd.DataFrame, pd.DataFrame | None, list[str]]:
    """A CSV's rows with lr / batch / group columns: one row per hyperparameter group (scaling.fitting.hyperparams.hparams).

    A group column must label every row, and each group needs runs that differ in lr or batch.
    Returns (rows for the loss laws, the runs for the hyperparameter fit or None without groups, notes).
    """
    from scaling.fitting.hyperparams import hparams as H

    if mode not in H.MODES:
        raise FitError(f"unknown hyperparameter mode {mode!r} (use one of {', '.join(H.MODES)})")
    runs = out.copy()
    if picked["group"] is not None:
        col = picked["group"]
        text = df[col].to_numpy()[keep]
        empty = np.array([v is None or (isinstance(v, float) and math.isnan(v)) or not str(v).strip() for v in text])
        if empty.any():
            i = int(np.flatnonzero(keep)[np.flatnonzero(empty)[0]])
            raise FitError(f"{where}column {col!r}, {label(i)}: empty group label (with a group column, every row "
                           "names its group)")
        runs["group"] = [str(v).strip() for v in text]
        for i, g in enumerate(runs["group"]):  # a label is printed in tables: no newline or terminal escape
            problem = printable_problem(g)
            if problem is not None:
                raise FitError(f"{where}column {col!r}, {label(int(np.flatnonzero(keep)[i]))}: the group label "
                               f"{problem}")
        sizes = runs.groupby("group").size()
        if (sizes < 2).any():
            g = str(sizes[sizes < 2].index[0])
            i = int(np.flatnonzero(keep)[int(np.flatnonzero(runs["group"].to_numpy() == g)[0])])
            raise FitError(f"{where}group {g!r} ({label(i)}) has one run: a group is the runs of one (N, D) that "
                           "differ in lr or batch, so it needs at least two")
    if not H.has_groups(runs):
        return out.drop(columns=[c for c in ("lr", "batch", "beta2") if c in out]), None, []
    rows, _, notes = H.tuned_points(runs, mode)
    return rows, runs, notes


def _missing_columns(picked: dict[str, str | None]) -> str:
    if picked["N"] is None:
        return f"no parameter-count column (one of {', '.join(ALIASES['N'])})"
    if picked["loss"] is None:
        return f"no loss column (one of {', '.join(ALIASES['loss'] + LOSS_UNIT_ALIASES['perplexity'])})"
    if picked["D"] is None and picked["C"] is None:
        return f"need tokens or FLOPs: no column among {', '.join(ALIASES['D'] + ALIASES['C'])}"
    return ""


def _flops_warnings(out: pd.DataFrame, flops_convention: str, col: str) -> list[str]:
    """Say when a given C column disagrees with 6ND (under 6N) or with itself (under ``given``)."""
    ratio = (out["C"] / (out["N"] * out["D"])).to_numpy()
    med = float(np.median(ratio))
    lo, hi = float(np.min(ratio)), float(np.max(ratio))
    if flops_convention == "6N":
        if abs(med / FLOPS_PER_PARAM_TOKEN - 1.0) > FLOPS_TOLERANCE or hi / lo > 1.0 + FLOPS_TOLERANCE:
            return [f"column {col!r} is not 6ND: C/(6ND) is {med / FLOPS_PER_PARAM_TOKEN:.3g} (median; {lo / FLOPS_PER_PARAM_TOKEN:.3g} to "
                    f"{hi / FLOPS_PER_PARAM_TOKEN:.3g}); points are fitted with their N and D and budgets mapped with 6ND; "
                    "pass --flops given to use C = k N D with k from the data"]
        return []
    if hi / lo > 1.0 + FLOPS_TOLERANCE:
        return [f"column {col!r}: C/(ND) ranges from {lo:.3g} to {hi:.3g} (median {med:.3g} used as k in C = k N D)"]
    return []


def csv_rows(path: str | Path, *, drop_duplicates: bool = False) -> tuple[pd.DataFrame, str, np.ndarray, int]:
    """The data rows of the CSV at ``path``, each once: (rows, separator, the file positions of the
    rows kept, copies dropped). The one reader of a CSV's rows, so the loss fits and the task
    columns (`scaling.fitting.tasks.task_laws.tasks_from_csv`) see the same rows.

    A row identical in every column to an earlier one is a copy, not another run: FitError naming
    both rows, or with ``drop_duplicates`` dropped (and counted).
    """
    df, sep = read_csv(path)
    if len(df) == 0:
        raise FitError(f"{path}: no data rows below the header")
    copies = df.duplicated(keep="first").to_numpy()
    dropped = int(copies.sum())
    if dropped and not drop_duplicates:
        i = int(np.flatnonzero(copies)[0])
        same = df.iloc[:i].eq(df.iloc[i]) | (df.iloc[:i].isna() & df.iloc[i].isna())
        j = int(np.flatnonzero(same.all(axis=1).to_numpy())[0])
        raise FitError(f"{path}: data row {i + 1} is identical to data row {j + 1} ({dropped} such copies in all): "
                       "a copy is not another run; remove the copies or pass --drop-duplicates")
    kept = np.flatnonzero(~copies)  # file positions of the rows read, so messages name the file's rows
    if dropped:
        df = df[~copies].reset_index(drop=True)
    return df, sep, kept, dropped


def from_csv(path: str | Path, *, flops_convention: str = "6N", unique_tokens: float | None = None,
             params_convention: str = "non_embedding", loss_units: str | None = None, drop_invalid: bool = False,
             r_star: float = R_STAR_DATA, hparams: str = "tuned", drop_duplicates: bool = False) -> FitData:
    """Read a CSV of measurements (column aliases in :data:`ALIASES`; see :func:`from_frame`).

    A row identical in every column to an earlier one is a copy, not another run (counted, it
    would double its group's runs and narrow every interval): refused, or with
    ``drop_duplicates`` dropped and counted in a warning.
    """
    df, sep, kept, dropped = csv_rows(path, drop_duplicates=drop_duplicates)
    data = from_frame(df, flops_convention=flops_convention, params_convention=params_convention,
                      source=str(path), unique_tokens=unique_tokens, loss_units=loss_units,
                      drop_invalid=drop_invalid, r_star=r_star, row_label=lambda i: f"data row {kept[i] + 1}",
                      hparams=hparams)
    if dropped:
        message = f"dropped {dropped} of {dropped + len(df)} rows identical to an earlier row (--drop-duplicates)"
        data.warnings.insert(0, message)
        data.notes.insert(0, Note(NoteKind.WARNING, f"warning: {message}"))
    if sep != ",":
        data.notes.insert(0, f"read as {'tab' if sep == chr(9) else repr(sep)}-separated"
                          + (" with decimal commas" if sep == ";" else ""))
    return data


def prepare(
    df: pd.DataFrame,
    *,
    flops_convention: str = "6N",
    params_convention: str = "non_embedding",
    source: str = "",
    unique_tokens: float | None = None,
    curves: pd.DataFrame | None = None,
    r_star: float = R_STAR_DATA,
    unique_tokens_column: str | None = None,
) -> FitData:
    """Validate N, D, C, loss and average repeated seeds: rows equal in every other column.

    A column ``U`` holds each row's unique tokens; columns named ``extra:<name>`` are further
    descriptions of a run (dataset, setting) that rows must share to be averaged.
    Raises :class:`FitError` naming the first bad row for non-finite or non-positive values.
    """
    where = f"{source}: " if source else ""
    _check_positive(df, where)
    has_u = "U" in df.columns
    work, keys, extras, points = _average(df, has_u)
    loss = points["loss"].to_numpy(float)
    if len(loss) > 1 and loss.max() - loss.min() < MIN_LOSS_SPREAD * loss.max():
        spread = (loss.max() - loss.min()) / loss.max()
        raise FitError(f"{where}the losses do not vary: the {len(loss)} points' losses (about {loss.max():.6g}) "
                       f"differ by at most {spread:.2g} relative, less than {MIN_LOSS_SPREAD:g}, so there is no "
                       "dependence on N, D or C to fit")
    ratio = points["C"] / (points["N"] * points["D"])
    k = FLOPS_PER_PARAM_TOKEN if flops_convention == "6N" else float(np.median(ratio))
    notes: list[str] = []
    if (points["n_seeds"] > 1).any():
        notes.append(f"averaged {len(work)} runs into {len(points)} points over seeds "
                     "(rows equal in every column but seed and loss)")
    n_nd = work.groupby([keys[0], keys[1]], sort=False).ngroups
    if n_nd < len(points):
        notes.append(f"{len(points) - n_nd} point(s) share N and D with another but differ in "
                     + ", ".join(["C"] + (["U"] if has_u else []) + [c.split(":", 1)[1] for c in extras])
                     + ": kept apart, not averaged")
    effective = _effective_data(points, has_u, unique_tokens, r_star, unique_tokens_column, notes)
    return FitData(
        points=points,
        curves=_usable_curves(curves),
        params_convention=params_convention,
        flops_convention=flops_convention,
        flops_per_param_token=k,
        source=source,
        unique_tokens=unique_tokens,
        unique_tokens_column=unique_tokens_column if has_u else None,
        effective_data=effective,
        r_star=r_star,
        notes=notes,
    )


def _check_positive(df: pd.DataFrame, where: str) -> None:
    """Refuse no rows, or a row whose N, D, C or loss is not a positive, finite number (naming the first)."""
    if len(df) == 0:
        raise FitError(f"{where}no points to fit (no completed runs or empty file)")
    for col in ("N", "D", "C", "loss"):
        vals = pd.to_numeric(df[col], errors="coerce").to_numpy(dtype=float)
        bad = ~np.isfinite(vals) | (vals <= 0)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise FitError(
                f"{where}{int(bad.sum())} point(s) with non-positive or non-finite {col} "
                f"(first: row {i}, {col}={float(vals[i])!r})"
            )


def _average(df: pd.DataFrame, has_u: bool) -> tuple[pd.DataFrame, list[pd.Series], list[str], pd.DataFrame]:
    """(the rows' values, the keys they are grouped by, the ``extra:`` columns, the points): rows equal in
    every column but seed and loss averaged into one point, with the SD and count of their losses."""
    value_cols = ["N", "D", "C", "loss"] + (["U"] if has_u else [])
    work = df[value_cols].astype(float).reset_index(drop=True)
    extras = [c for c in df.columns if str(c).startswith("extra:")]
    same = point_keys(work, ["N", "D", "C"] + (["U"] if has_u else []))
    keys = [same[c].rename(f"_k{i}") for i, c in enumerate(same.columns)]
    keys += [df[c].reset_index(drop=True).astype(str).rename(c) for c in extras]
    grouped = work.groupby(keys, sort=True, dropna=False)
    points = pd.DataFrame(
        {
            "N": grouped["N"].mean(),
            "D": grouped["D"].mean(),
            "C": grouped["C"].mean(),
            "loss": grouped["loss"].mean(),
            "loss_std": grouped["loss"].std(ddof=1),
            "n_seeds": grouped["loss"].size(),
        }
    )
    if has_u:
        points["U"] = grouped["U"].mean()
    return work, keys, extras, points.sort_values(["N", "D"], kind="stable").reset_index(drop=True)


def _effective_data(points: pd.DataFrame, has_u: bool, unique_tokens: float | None, r_star: float,
                    column: str | None, notes: list[str]) -> bool:
    """Replace D by Muennighoff et al.'s D' (the raw D kept as ``D_raw``) where unique tokens are known,
    saying so in ``notes``; whether any point repeats data."""
    if has_u:
        points["D_raw"] = points["D"]
        points["D"] = effective_tokens(points["D"].to_numpy(), points["U"].to_numpy(), r_star)
        repeated = int((points["D_raw"] > points["U"]).sum())
        n_u = points["U"].nunique()
        notes.append(f"D is Muennighoff et al.'s effective data D' from each row's unique tokens (column "
                     f"{column or 'U'!r}, {n_u} distinct value{'s' if n_u > 1 else ''}, "
                     f"R*_D = {r_star:.4g}); {repeated} of {len(points)} points repeat data")
        return repeated > 0
    if unique_tokens is None:
        return False
    points["D_raw"] = points["D"]
    points["D"] = effective_tokens(points["D"].to_numpy(), unique_tokens, r_star)
    effective = bool((points["D_raw"] > unique_tokens).any())
    if effective:
        notes.append(f"D is Muennighoff et al.'s effective data with U = {unique_tokens:.4g} unique tokens "
                     f"(R*_D = {r_star:.4g})")
    else:
        notes.append(f"unique tokens U = {unique_tokens:.4g} had no effect: every D is at most U "
                     "(one pass or less), so D' = D")
    return effective


def _usable_curves(curves: pd.DataFrame | None) -> pd.DataFrame | None:
    """The curve rows with positive, finite tokens, FLOPs and loss (None when none is left)."""
    if curves is None:
        return None
    curves = curves.dropna(subset=["tokens", "flops", "loss"])
    curves = curves[(curves["tokens"] > 0) & (curves["flops"] > 0) & (curves["loss"] > 0)]
    curves = curves[np.isfinite(curves["loss"])]
    return curves if len(curves) else None


def group_budgets(C: np.ndarray, rel_tol: float = 0.05) -> np.ndarray:
    """Label points whose FLOPs agree within ``rel_tol`` (in log space) as one IsoFLOP budget.

    Returns an integer label per point, budgets numbered by increasing compute.
    """
    logc = np.log(np.asarray(C, dtype=float))
    order = np.argsort(logc)
    labels = np.empty(len(logc), dtype=int)
    current, start = 0, logc[order[0]] if len(order) else 0.0
    for pos, i in enumerate(order):
        if pos and logc[i] - start > math.log1p(rel_tol):
            current += 1
            start = logc[i]
        labels[i] = current
    return labels
