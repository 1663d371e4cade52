"""Mixture-of-experts measurements: active size, tokens, loss, and how sparse or fine-grained each run is.

One row per run: N (active parameters by default, the convention every MoE law here uses), D,
loss, and what makes the run a mixture of experts: ``n_experts`` and ``top_k`` (or the total
parameters ``N_total``), ``granularity``. From them each point gets

- ``S``: sparsity, the inactive share of the parameters, 1 - N_active / N_total; without a total
  column, 1 - top_k / n_experts (the share of the experts a token does not use: the experts'
  layers' sparsity, which ignores the shared attention, so it overstates the model's);
- ``G``: granularity, as Krajewski et al. 2024 define it (the dense feed-forward width over one
  expert's), taken from its column.

A CSV is read through the bounded reader (:mod:`scaling.fitting.core.tabular`); a bad cell is
refused in one line naming its row. Runs of one point that differ only in learning rate or batch
are reduced to their best loss (the tuned point), as a sweep over hyperparameters is meant.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd

from scaling.accounting import FLOPS_PER_PARAM_TOKEN, Shape, family_fields
from scaling.errors import FitError
from scaling.fitting.core.measurements import FitData, csv_rows
from scaling.fitting.core.tabular import ACCEPTED, parse_numbers

#: CSV column aliases (case-insensitive) of each quantity.
MOE_ALIASES: dict[str, tuple[str, ...]] = {
    "N": ("N", "N_active", "active_params", "n_params_active", "N_params_active"),
    "N_total": ("N_total", "total_params", "n_params_total", "N_params_total", "N_params_total_nonembed"),
    "D": ("D", "tokens", "D_tokens"),
    "C": ("C", "flops", "compute"),
    "loss": ("loss", "final_loss", "eval_loss"),
    "n_experts": ("n_experts", "experts", "num_experts"),
    "top_k": ("top_k", "topk"),
    "granularity": ("granularity", "G"),
    "lr": ("lr", "learning_rate", "lr_peak"),
    "batch": ("batch_tokens", "batch_size_tokens", "batch"),
}
#: Columns whose values pick one of a point's runs (the lowest loss is kept), not describe the point.
HYPERPARAMETERS = ("lr", "batch")
#: Where each MoE variable comes from, as stated in the fit's conventions.
SPARSITY_SOURCES = {"N_total": "1 - N_active / N_total", "experts": "1 - top_k / n_experts (the experts' layers only)"}


class NoExpertsError(FitError):
    """A sweep none of whose runs is a mixture of experts: no law of sparsity to fit (not a fault)."""


@dataclass
class MoEData(FitData):
    """:class:`FitData` whose points also carry ``S`` (sparsity) and ``G`` (granularity), NaN where unknown.

    ``sparsity_source``: how S was computed (a key of :data:`SPARSITY_SOURCES`), None without S.
    """

    sparsity_source: str | None = None
    has_granularity: bool = False

    def conventions(self) -> dict[str, Any]:
        out = super().conventions()
        out["N"] = "active parameters"
        out["C"] = f"{self.flops_per_param_token:g} N_active D"
        if self.sparsity_source:
            out["sparsity"] = SPARSITY_SOURCES[self.sparsity_source]
        if self.has_granularity:
            out["granularity"] = "dense feed-forward width / expert width (column)"
        return out

    def values(self, name: str) -> np.ndarray:
        """One column of the points as floats."""
        return self.points[name].to_numpy(float)


def _pick(columns: list[str], key: str, where: str) -> str | None:
    names = {n.lower() for n in MOE_ALIASES[key]}
    hits = [c for c in columns if c.strip().lower() in names]
    if len(hits) > 1:
        raise FitError(f"{where}columns {', '.join(repr(c) for c in hits)} all give {key}: keep one")
    return hits[0] if hits else None


def _numbers(df: pd.DataFrame, col: str, key: str, where: str, label: Callable[[int], str]) -> np.ndarray:
    """A column's values, each a finite positive number, else one line naming the first bad row."""
    parsed = parse_numbers(df[col])
    v = parsed.values
    if parsed.unreadable.any():
        i = int(np.flatnonzero(parsed.unreadable)[0])
        cell = str(parsed.text.iloc[i])[:40] if parsed.text is not None else ""
        raise FitError(f"{where}column {col!r}, {label(i)}: cannot read {cell!r} as a number ({ACCEPTED})")
    with np.errstate(invalid="ignore"):
        bad = ~np.isfinite(v) | (v <= 0) | (v > 1e100)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise FitError(f"{where}column {col!r}, {label(i)}: {key} must be a positive finite number, not {v[i]!r}")
    return v


def from_frame(df: pd.DataFrame, *, source: str = "frame", row_label: Callable[[int], str] | None = None) -> MoEData:
    """The MoE points of a table (aliases in :data:`MOE_ALIASES`); see the module's docstring."""
    where = f"{source}: " if source else ""
    label = row_label or (lambda i: f"row {i}")
    cols = [str(c) for c in df.columns]
    df = df.set_axis(cols, axis=1)
    picked = {key: _pick(cols, key, where) for key in MOE_ALIASES}
    if picked["N"] is None:
        raise FitError(f"{where}no active-parameter column (one of {', '.join(MOE_ALIASES['N'])})")
    if picked["loss"] is None:
        raise FitError(f"{where}no loss column (one of {', '.join(MOE_ALIASES['loss'])})")
    if picked["D"] is None and picked["C"] is None:
        raise FitError(f"{where}need tokens or FLOPs: no column among {', '.join(MOE_ALIASES['D'] + MOE_ALIASES['C'])}")
    if (picked["n_experts"] is None) != (picked["top_k"] is None):
        have, lack = ("n_experts", "top_k") if picked["top_k"] is None else ("top_k", "n_experts")
        raise FitError(f"{where}column {picked[have]!r} gives {have} but no column gives {lack}: sparsity needs both")
    if picked["N_total"] is None and picked["n_experts"] is None and picked["granularity"] is None:
        raise FitError(f"{where}no column says how the runs are mixtures of experts: give N_total, n_experts and "
                       "top_k, or granularity")
    v = {key: _numbers(df, col, key, where, label) for key, col in picked.items() if col is not None}
    n = len(df)
    N = v["N"]
    D = v["D"] if "D" in v else v["C"] / (FLOPS_PER_PARAM_TOKEN * N)
    out = pd.DataFrame({"N": N, "D": D, "C": FLOPS_PER_PARAM_TOKEN * N * D, "loss": v["loss"]})
    source_s = None
    if "N_total" in v:
        below = v["N_total"] < N * (1 - 1e-9)
        if below.any():
            i = int(np.flatnonzero(below)[0])
            raise FitError(f"{where}{label(i)}: N_total {v['N_total'][i]:.6g} is below the active parameters "
                           f"{N[i]:.6g} (column {picked['N_total']!r}): a model cannot use more than it has")
        out["S"] = np.clip(1.0 - N / v["N_total"], 0.0, None)
        source_s = "N_total"
    if "n_experts" in v:
        for key in ("n_experts", "top_k"):
            frac = v[key] != np.round(v[key])
            if frac.any():
                i = int(np.flatnonzero(frac)[0])
                raise FitError(f"{where}column {picked[key]!r}, {label(i)}: {key} must be a whole number, not {v[key][i]!r}")
        over = v["top_k"] > v["n_experts"]
        if over.any():
            i = int(np.flatnonzero(over)[0])
            raise FitError(f"{where}{label(i)}: top_k {v['top_k'][i]:g} is more than n_experts {v['n_experts'][i]:g}: "
                           "a token cannot use more experts than there are")
        out["n_experts"], out["top_k"] = v["n_experts"], v["top_k"]
        if source_s is None:
            out["S"] = 1.0 - v["top_k"] / v["n_experts"]
            source_s = "experts"
    if "S" not in out:
        out["S"] = np.nan
    out["G"] = v["granularity"] if "granularity" in v else np.full(n, np.nan)
    notes: list[str] = []
    hyper = [picked[h] for h in HYPERPARAMETERS if picked[h] is not None]
    keys = ["N", "D", "S", "G"] + [c for c in ("n_experts", "top_k") if c in out]
    if hyper:
        out = _best_runs(out, keys, hyper, notes)
    elif out.duplicated(subset=keys).any():
        i = int(np.flatnonzero(out.duplicated(subset=keys).to_numpy())[0])
        notes.append(f"{int(out.duplicated(subset=keys).sum())} row(s) repeat the N, D and experts of an earlier row "
                     f"(first: {label(i)}): each is fitted as a point of its own (seeds), not averaged")
    loss = out["loss"].to_numpy(float)
    if len(loss) > 1 and loss.max() - loss.min() < 1e-4 * loss.max():
        raise FitError(f"{where}the losses do not vary (all about {loss.max():.6g}): there is nothing to fit")
    points = out.sort_values(["N", "D"], kind="stable").reset_index(drop=True)
    points["loss_std"], points["n_seeds"] = np.nan, 1
    return MoEData(points=points, params_convention="active", flops_convention="6N", flops_per_param_token=FLOPS_PER_PARAM_TOKEN,
                   source=source, notes=notes, sparsity_source=source_s,
                   has_granularity=bool(np.isfinite(points["G"]).any()))


def _best_runs(out: pd.DataFrame, keys: list[str], hyper: list[str], notes: list[str]) -> pd.DataFrame:
    """One row per point: the run with the lowest loss among those differing in learning rate or batch."""
    best = out.loc[out.groupby(keys, sort=False, dropna=False)["loss"].idxmin()].reset_index(drop=True)
    if len(best) < len(out):
        notes.append(f"{len(out)} runs reduced to {len(best)} points: each point's lowest loss over "
                     f"{' and '.join(repr(h) for h in hyper)}")
    return best


def from_csv(path: str | Path) -> MoEData:
    """Read a CSV of MoE measurements (bounded; copies of a row refused; aliases in :data:`MOE_ALIASES`)."""
    df, _, kept, _ = csv_rows(path)
    return from_frame(df, source=str(path), row_label=lambda i: f"data row {kept[i] + 1}")


def is_moe_spec(model: Any) -> bool:
    """Whether a run spec's model section describes a mixture of experts."""
    return isinstance(model, dict) and (model.get("family") == "moe" or "n_experts" in model)


def spec_shape(model: dict[str, Any]) -> Shape:
    """The shape a stored run spec's model section describes, its left-out fields resolved by its
    family (``scaling.families``: a spec serializes only what differs from the defaults);
    ValueError naming the problem when the section makes no shape."""
    sizes = [name for name in ("n_layer", "d_model", "n_head") if not isinstance(model.get(name), int)]
    if sizes:
        raise ValueError(f"its model section has no whole {', '.join(sizes)}")
    extra = {name: model[name] for name in ("vocab_size", "context") if isinstance(model.get(name), int)}
    return Shape(model["n_layer"], model["d_model"], model["n_head"], **extra,  # type: ignore[arg-type]
                 **family_fields(model))  # type: ignore[arg-type]


def experts_of(spec: Any) -> dict[str, Any]:
    """n_experts, top_k and granularity of a stored run spec (:attr:`scaling.accounting.Shape.granularity`:
    the dense width ``ffn`` over ``expert_ffn``, both as the family resolves them); a dense family's
    run is one expert, top-1, granularity 1. ValueError when the spec's model section makes no shape."""
    model = spec.get("model") if isinstance(spec, dict) else None
    if not is_moe_spec(model):
        return {"n_experts": 1, "top_k": 1, "granularity": 1.0}
    assert isinstance(model, dict)
    shape = spec_shape(model)
    return {"n_experts": shape.n_experts, "top_k": shape.top_k, "granularity": shape.granularity}


def from_db(url: str, sweep: str | None = None) -> tuple[MoEData, str]:
    """A sweep's completed runs with their experts read from each run's stored spec (:func:`experts_of`).

    N is the runs table's N: a sweep's laws count active parameters (scaling.accounting).
    """
    from scaling import db

    if sweep is None:
        with db.connect(url) as res:
            sweep = res.latest_sweep()
        if sweep is None:
            raise FitError("the database has no sweeps to fit")
    return from_runs(completed_runs(url, sweep), sweep), sweep


def completed_runs(url: str, sweep: str) -> pd.DataFrame:
    """A sweep's runs its fits use, with their stored specs: read once, for :func:`from_runs` and
    :func:`mixed_expert_runs` alike."""
    from scaling import db
    from scaling.fitting.core.sweep_data import fitted_runs

    with db.connect(url) as res:
        return fitted_runs(res.runs(sweep=sweep, spec=True))


def _is_moe(runs: pd.DataFrame) -> list[bool]:
    return [is_moe_spec(s.get("model") if isinstance(s, dict) else None) for s in runs["spec"]]


def from_runs(runs: pd.DataFrame, sweep: str) -> MoEData:
    """:func:`from_db` on runs already read (:func:`completed_runs`)."""
    if len(runs) == 0:
        raise FitError(f"sweep {sweep!r} has no completed runs to fit")
    if not any(_is_moe(runs)):
        raise NoExpertsError(f"sweep {sweep!r} has no mixture-of-experts runs (no run spec's model is of the moe family)")
    keys = list(runs["run_key"])
    rows = []
    for key, n, d, loss, s in zip(keys, runs["N"], runs["D"], runs["loss"], runs["spec"]):
        try:
            rows.append({"N": n, "D": d, "loss": loss, **experts_of(s)})
        except ValueError as e:
            raise FitError(f"sweep {sweep!r}, run {key}: {e}") from None
    table = pd.DataFrame(rows)
    if table["granularity"].nunique() < 2:
        table = table.drop(columns=["granularity"])  # not a variable of this sweep
    return from_frame(table, source=f"sweep {sweep!r}", row_label=lambda i: f"run {keys[i]}")


def mixed_expert_runs(runs: pd.DataFrame) -> frozenset[str]:
    """The keys of the mixture-of-experts runs among ``runs`` (:func:`completed_runs`) when there are dense
    ones too (empty otherwise): the dense laws leave them out, as a dense law fitted through both families
    describes neither. A sweep of experts alone keeps them (its laws then count active parameters)."""
    experts = _is_moe(runs)
    if all(experts) or not any(experts):
        return frozenset()
    return frozenset(key for key, moe in zip(runs["run_key"], experts) if moe)


def distinct(values: np.ndarray, rel: float = 1e-6) -> int:
    """How many distinct values ``values`` holds, values within ``rel`` of each other counted once."""
    v = np.sort(np.asarray(values, float)[np.isfinite(values)])
    if not v.size:
        return 0
    return 1 + int(np.sum(np.diff(v) > rel * np.maximum(np.abs(v[1:]), 1e-300)))

