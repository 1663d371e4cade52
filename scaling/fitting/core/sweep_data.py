"""A sweep's completed runs read from the database as :class:`~scaling.fitting.core.measurements.FitData`.

The runs the fits use (:func:`fitted_runs`: completed, with a final loss, no cooldown trunk), their
loss curves, their unique tokens for effective data and their hyperparameter groups, averaged into
points by :func:`~scaling.fitting.core.measurements.prepare` as a CSV's are.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from scaling.errors import FitError, NotFoundError
from scaling.fitting.core.measurements import R_STAR_DATA, FitData, prepare
from scaling.quantities import RULES, broken
from scaling.vocab import COMPLETED

if TYPE_CHECKING:
    from scaling.db.results import Results


def from_db(url: str, sweep: str | None = None, *, effective_data: bool = False,
            r_star: float = R_STAR_DATA, hparams: str = "tuned", predicted: pd.DataFrame | None = None,
            predicted_notes: tuple[str, ...] = (), leave_out: frozenset[str] = frozenset(),
            predicted_draws: np.ndarray | None = None) -> tuple[FitData, str]:
    """A sweep's completed runs (and their loss curves) as :class:`FitData`; returns (data, sweep).

    N is the runs table's ``N`` (the sweep's params convention); the loss is the final eval loss,
    falling back to the final train loss where no eval loss was recorded. A cooldown branch is a
    point (N, D) like any run; the trunk it starts from is not (it never cooled down).
    ``effective_data``: D is Muennighoff et al.'s D' (R*_D = ``r_star``) from each run's
    ``data.unique_tokens``: one U for the sweep when the runs share it, else a U per run (runs
    that differ in U are then never averaged together).
    Runs of one (N, D) that differ in lr, batch or beta2 (or share a ``hparam_group``) are a
    hyperparameter group: one point each, its tuned loss or its grid's centre as ``hparams`` says
    (:func:`scaling.fitting.hyperparams.hparams.tuned_points`).
    ``predicted``: points (N, D, C, loss) predicted rather than trained (the cooldowns of trunks), added to the
    trained ones, with ``predicted_notes`` saying so among the data's notes; ``predicted_draws``: the predicting
    law's bootstrap replicates of their losses (replicates x points), kept as :attr:`FitData.predicted_draws`.
    ``leave_out``: run keys not fitted (a mixed sweep's mixtures of experts, which the laws of sparsity fit),
    said among the data's notes.
    """
    read = read_sweep(url, sweep, effective_data=effective_data, hparams=hparams, leave_out=leave_out)
    return points_of(read, r_star=r_star, predicted=predicted, predicted_notes=predicted_notes,
                     predicted_draws=predicted_draws), read.sweep


@dataclass(frozen=True)
class SweepRead:
    """What :func:`from_db` reads from the database, before any point is made of it (:func:`points_of`)."""

    sweep: str
    runs: pd.DataFrame
    table: pd.DataFrame
    curves: pd.DataFrame | None
    params_convention: str
    flops_convention: str
    unique: float | None
    hp_runs: pd.DataFrame | None
    hparams: str
    hp_notes: list[str]
    left_out: int


def read_sweep(url: str, sweep: str | None = None, *, effective_data: bool = False, hparams: str = "tuned",
               leave_out: frozenset[str] = frozenset()) -> SweepRead:
    """The database's part of :func:`from_db`, read once: a caller that adds predicted points after deciding
    whether to fit makes its points with :func:`points_of` as often as it needs, reading nothing again."""
    from scaling import db
    from scaling import vocab as names

    with db.connect(url) as res:
        if sweep is None:
            sweep = res.latest_sweep()
            if sweep is None:
                raise NotFoundError("the database has no sweeps to fit")
        info = _sweep_info(res, sweep)
        runs = fitted_runs(res.runs(sweep=sweep, spec=False))  # read once: the trunks to leave out are found among all of them
        if len(runs) == 0:
            raise FitError(f"sweep {sweep!r} has no completed runs to fit")
        check_stored_losses(runs, f"sweep {sweep!r}")
        runs, left_out = _without(runs, leave_out, sweep)
        params_conv = str(info.get("params_convention") or "non_embedding")
        flops_conv = str(info.get("flops_convention") or "6N")
        unique, columns = None, ["N", "D", "C", "loss"]
        if effective_data:
            per_run = _unique_tokens(runs)
            missing = int(per_run.isna().sum())
            if missing:
                raise FitError(f"sweep {sweep!r}: effective data needs the corpus's unique_tokens in the run specs "
                               f"({missing} of {len(runs)} completed runs have none)")
            if per_run.nunique() == 1:
                unique = float(per_run.iloc[0])
            else:
                runs["U"] = per_run
                columns.append("U")
        from scaling.fitting.hyperparams import hparams as H

        hp_runs = H.runs_frame(runs)
        table, hp_notes = runs[columns], []
        if H.has_groups(hp_runs):
            hp_runs = hp_runs[columns + [c for c in ("lr", "batch", "beta2", "group", "run_key") if c in hp_runs]]
            table, kept, hp_notes = H.tuned_points(hp_runs, hparams)
            runs = runs[runs["run_key"].isin(set(kept or []))]
        else:
            hp_runs = None
        m = res.metrics(run_keys=list(runs["run_key"]), names=[names.EVAL_LOSS, names.TRAIN_LOSS, names.EPOCH],
                        sweep=sweep)
        curves = loss_curves(m, runs[["run_key", "N"]], names.TRAIN_LOSS, names.EVAL_LOSS, names.EPOCH)
    return SweepRead(sweep, runs, table, curves, params_conv, flops_conv, unique, hp_runs, hparams, hp_notes, left_out)


def points_of(read: SweepRead, *, r_star: float = R_STAR_DATA, predicted: pd.DataFrame | None = None,
              predicted_notes: tuple[str, ...] = (), predicted_draws: np.ndarray | None = None) -> FitData:
    """:func:`from_db`'s points of what :func:`read_sweep` read, with the ``predicted`` points added."""
    trained = len(read.table)
    table, predicted_notes = _with_predicted(read.table, predicted, predicted_notes)
    data = prepare(
        table,
        flops_convention=read.flops_convention,
        params_convention=read.params_convention,
        source=f"sweep {read.sweep!r}",
        unique_tokens=read.unique,
        curves=read.curves,
        r_star=r_star,
        unique_tokens_column="data.unique_tokens" if "U" in read.table.columns else None,
    )
    _note_sources(data, read.runs, list(read.hp_notes), predicted_notes, read.left_out)
    if predicted is not None and len(predicted) and predicted_draws is not None and len(table) > trained:
        data.predicted_draws = (predicted[["N", "D"]].to_numpy(float), np.asarray(predicted_draws, float))
    if read.hp_runs is not None:
        data.hparam_runs, data.hparam_mode = read.hp_runs, read.hparams
    return data


def _with_predicted(table: pd.DataFrame, predicted: pd.DataFrame | None,
                    notes: tuple[str, ...]) -> tuple[pd.DataFrame, tuple[str, ...]]:
    """``table`` with the ``predicted`` points added, and the notes that say so; where the table's points
    carry more than N, D, C and loss (unique tokens, a hyperparameter group), a predicted point could not
    stand beside them, and a note says it was not used."""
    if predicted is None or not len(predicted):
        return table, notes
    columns = ["N", "D", "C", "loss"]
    if list(table.columns) == columns:
        return pd.concat([table, predicted[columns]], ignore_index=True), notes
    extra = ", ".join(c for c in table.columns if c not in columns)
    return table, (f"{len(predicted)} predicted final loss(es) of trunks' cooldowns not used: the sweep's points "
                   f"carry {extra}, which a predicted point has not",)


def _without(runs: pd.DataFrame, leave_out: frozenset[str], sweep: str) -> tuple[pd.DataFrame, int]:
    """``runs`` less those keyed in ``leave_out``, and how many were left out; none left is refused."""
    left_out = int(runs["run_key"].isin(leave_out).sum())
    runs = runs[~runs["run_key"].isin(leave_out)]
    if len(runs) == 0:
        raise FitError(f"sweep {sweep!r} has no completed runs to fit once its {left_out} left-out runs are set aside")
    return runs, left_out


def _note_sources(data: FitData, runs: pd.DataFrame, hp_notes: list[str], predicted_notes: tuple[str, ...],
                  left_out: int) -> None:
    """Say among ``data``'s notes where its points come from: tuned groups, finals predicted by early
    stopping or from trunks, runs left out."""
    data.notes.extend(hp_notes)
    data.predicted_finals = predicted_finals(runs)
    if data.predicted_finals:
        data.predicted_note = predicted_note(data.predicted_finals, len(runs))
        data.notes.append(data.predicted_note)
    data.notes.extend(predicted_notes)
    if left_out:
        data.notes.append(f"{left_out} mixture-of-experts run(s) left out of these laws: the laws of sparsity fit them, "
                          f"with N their active parameters")


def predicted_finals(runs: pd.DataFrame) -> int:
    """How many of ``runs`` (a :func:`fitted_runs` table) stopped early: their final loss is predicted."""
    if "stopped_step" not in runs or not len(runs):
        return 0
    return int(pd.to_numeric(runs["stopped_step"], errors="coerce").notna().sum())


def predicted_note(predicted: int, total: int) -> str:
    """The one line that says a fit's final losses are partly predicted."""
    return (f"{predicted} of {total} final losses are predicted, not measured: those runs stopped early once their "
            "final loss was predicted within the plan's early_stop tolerance")


def check_stored_losses(runs: pd.DataFrame, source: str) -> None:
    """Refuse a run whose final loss read back from the database a CSV cell could not hold (the
    same rule, :mod:`scaling.quantities`), in one line naming the run."""
    bad = broken("loss", runs["loss"].to_numpy(float))
    if bad.any():
        row = runs.iloc[int(np.flatnonzero(bad)[0])]
        raise FitError(f"{source}: run {row['run_key']}: final loss {float(row['loss'])!r} in the database: "
                       f"{RULES['loss'].says}; {int(bad.sum())} such run(s), none fitted")


def fitted_runs(every: pd.DataFrame) -> pd.DataFrame:
    """The runs of a sweep's listing (``Results.runs()``) that its fits use, with a ``loss`` column:
    the completed ones except trunks of cooldown branches (a trunk never cooled down), their loss the
    final held-out loss, else the final training loss. Every fit of a sweep reads its runs through
    this (the loss laws, the hyperparameter laws, a rule transferred from them, the report)."""
    runs = every[every["status"] == COMPLETED]
    if len(runs) and "parent_key" in every:
        runs = runs[~runs["run_key"].isin(set(every["parent_key"].dropna()))]
    runs = runs.copy()
    loss = pd.to_numeric(runs["final_loss"], errors="coerce") if "final_loss" in runs else pd.Series(np.nan, index=runs.index)
    if "final_train_loss" in runs:
        loss = loss.fillna(pd.to_numeric(runs["final_train_loss"], errors="coerce"))
    runs["loss"] = loss
    return runs


def loss_curves(m: pd.DataFrame | None, runs: pd.DataFrame, train: str, evaluation: str, epoch: str) -> pd.DataFrame | None:
    """Each run's loss curve for approach 1: its train loss over its first epoch, else its eval loss.

    Hoffmann et al. (2022, Sec. 3.1) build the envelope from smoothed *training* loss curves: in
    a single pass over the data each batch is unseen when its loss is measured, so the train loss
    estimates held-out loss, logged every few steps where eval loss is logged rarely (a handful of
    points per run cannot place a minimum between budgets). Past one epoch the train loss is on
    seen data and biased low, so those steps are dropped. A run with fewer than two such train
    points falls back to its eval curve. Column ``metric`` says which was used.
    """
    if m is None or len(m) == 0:
        return None
    m = m[["run_key", "step", "tokens", "flops", "name", "value"]]
    tr = m[m["name"] == train]
    ep = m[m["name"] == epoch]
    if len(tr) and len(ep):
        tr = tr.merge(ep[["run_key", "step", "value"]].rename(columns={"value": "_epoch"}), on=["run_key", "step"],
                      how="left")
        tr = tr[~(pd.to_numeric(tr["_epoch"], errors="coerce") > 1.0)].drop(columns="_epoch")
    use_train = tr.groupby("run_key").size()
    use_train = set(use_train[use_train >= 2].index)
    ev = m[(m["name"] == evaluation) & ~m["run_key"].isin(use_train)]
    out = pd.concat([tr[tr["run_key"].isin(use_train)], ev], ignore_index=True)
    if len(out) == 0:
        return None
    out = out.rename(columns={"value": "loss", "name": "metric"}).merge(runs, on="run_key", how="inner")
    return out[["run_key", "N", "tokens", "flops", "loss", "metric"]].astype(
        {"tokens": float, "flops": float, "loss": float})


def _sweep_info(res: Results, sweep: str) -> dict[str, Any]:
    """The sweep's stored description (conventions, plan)."""
    info = res.sweep_info(sweep)
    if info is None:
        raise NotFoundError(f"sweep {sweep!r} not found")
    return dict(info)


def _unique_tokens(runs: pd.DataFrame) -> pd.Series:
    """Each run's ``unique_tokens`` column (its spec's ``data.unique_tokens``; NaN where it has none)."""
    if "unique_tokens" not in runs:
        return pd.Series(math.nan, index=runs.index, dtype=float)
    u = pd.to_numeric(runs["unique_tokens"], errors="coerce").astype(float)
    return u.where(np.isfinite(u) & (u > 0))
