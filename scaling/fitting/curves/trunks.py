"""Final losses predicted from trunks: one WSD run per model size, every other token budget's cooldown predicted.

A grid block with ``branches: {..., cooldowns: predicted}`` trains one trunk per size: a ``wsd`` run to the
largest budget, tagged with the budgets. Here the trunks' whole eval-loss curves fit the curve law across
sizes (:class:`~scaling.fitting.curves.joint.JointCurveLaw`), and each smaller budget's final loss is
predicted for the cooldown branch it stands for: the trunk's rate (its warmup, then its peak) up to the
branch's decay, then the branch's own decay over its last ``decay_fraction`` of steps. These rows join the
trained points of the Chinchilla approaches, each marked as predicted in the data's notes. Nothing is
predicted from a law doubted for more than its parameters (too few sizes, no decay seen, a bootstrap that
measures nothing): the note says why, and only the trunks' own final losses are points. A law doubted for its
parameters (pinned at a bound) still predicts where its bootstrap determines the prediction: a predicted loss
whose replicates give no interval, or one wider than ``UNDETERMINED_WIDTH`` of the loss, is withheld, a doubt of
the law saying why.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np
import pandas as pd

from scaling.batching import steps_for
from scaling.curve_forms import warmup_end
from scaling.errors import UserError
from scaling.fitting.core.doubts import DoubtKind
from scaling.fitting.curves.data import Curve, run_curve
from scaling.fitting.curves.fit import UNDETERMINED_WIDTH
from scaling.fitting.curves.joint import JointCurveLaw, fit_joint
from scaling.fmt import Interval, size
from scaling.lr_schedule import lr_steps, schedule_of, warmup_steps
from scaling.vocab import COMPLETED, EVAL_LOSS, PREDICT_TOKENS_TAG

__all__ = ["TRUNK_BOOTSTRAP", "Trunk", "TrunkPredictions", "branch_rate", "predict_from_trunks", "read_trunks",
           "trunk_predictions", "trunk_predictions_of", "trunks_digest"]

#: A trunk: its spec, its eval-loss curve and its compute C.
Trunk = tuple[dict[str, Any], Curve, float]
#: Bootstrap replicates of the law across sizes at most (each a refit of every trunk's curve).
TRUNK_BOOTSTRAP = 50


@dataclass
class TrunkPredictions:
    """The predicted points (``rows``: run, N, D, C, loss, lo, hi: one per trunk and smaller budget), the law
    they come from (None where none was fitted) and notes saying what was predicted, or why nothing was."""

    rows: pd.DataFrame
    law: Optional[JointCurveLaw] = None
    notes: list[str] = field(default_factory=list)
    #: The largest trunk's recipe: peak rate, batch (tokens per step), warmup (share of its steps), steps.
    recipe: Optional[tuple[float, float, float, int]] = None

    #: The law's bootstrap replicates of each row's loss (replicates x rows; no rows without a bootstrap).
    draws: Optional[np.ndarray] = None

    def points(self) -> pd.DataFrame:
        """The rows as points of the loss laws (N, D, C, loss)."""
        return self.rows[["N", "D", "C", "loss"]]


def branch_rate(trunk: dict[str, Any], steps: int) -> np.ndarray:
    """The rate of every step of the cooldown branch of ``steps`` steps that leaves a trunk (its spec): the
    trunk's warmup and peak, then the trunk's decay (shape, floor, share of the steps) over the branch's end."""
    sched = dict(trunk.get("schedule") or {})
    trunk_steps = steps_for(int(trunk["tokens"]), int(trunk["batch_tokens"]))
    sched["warmup_steps"] = warmup_steps(trunk_steps, schedule_of(sched))
    return lr_steps(steps, float(trunk["optimizer"]["lr"]), schedule_of(sched))


def budgets(spec: dict[str, Any]) -> list[float]:
    """A trunk's token budgets from its tag (none for any other run)."""
    text = str((spec.get("tags") or {}).get(PREDICT_TOKENS_TAG) or "")
    out = []
    for part in text.split(","):
        try:
            value = float(part)
        except ValueError:
            continue
        if math.isfinite(value) and value > 0:
            out.append(value)
    return out


def predict_from_trunks(trunks: list[Trunk], *, bootstrap: int = TRUNK_BOOTSTRAP, seed: int = 0,
                        law: Optional[JointCurveLaw] = None) -> TrunkPredictions:
    """Each trunk (its spec, its curve, its C) fitted into the law across sizes, and each of its smaller budgets'
    final loss predicted with a 95% interval; ``law``: the law these trunks were fitted to already (a stored
    analysis'), which predicts them without fitting anything."""
    empty = pd.DataFrame(columns=["run", "N", "D", "C", "loss", "lo", "hi"])
    try:
        if law is None:
            law = fit_joint([c for _, c, _ in trunks], bootstrap=min(bootstrap, TRUNK_BOOTSTRAP), seed=seed)
    except UserError as exc:
        return TrunkPredictions(empty, None, [f"predicted cooldowns: none: {' '.join(str(exc).split())}"])
    verdicts = [str(d) for d in law.doubts() if not d.kind.about_parameters]
    if verdicts:
        return TrunkPredictions(empty, law, ["predicted cooldowns: none, the curve law across sizes is not trusted: "
                                             + "; ".join(verdicts)])
    rows, draws, withheld = [], [], {}
    doubted = any(d.kind.about_parameters for d in law.doubts())
    for spec, curve, C in trunks:
        batch, total = int(spec["batch_tokens"]), int(curve.lr.size)
        for D in budgets(spec):
            steps = steps_for(round(D), batch)
            if steps >= total:
                continue  # the trunk itself is this budget's run
            rate = branch_rate(spec, steps)
            iv = law.final_loss(float(curve.N), rate)  # type: ignore[arg-type]
            sample = law.draws_at(float(curve.N), rate, [steps - 1])[:, 0]  # type: ignore[arg-type]
            why = undetermined(iv, bool(sample.size), doubted)
            if why is not None:
                withheld.setdefault(why, []).append(curve.run)
                continue
            draws.append(sample)
            rows.append({"run": curve.run, "N": float(curve.N), "D": float(steps * batch),  # type: ignore[arg-type]
                         "C": C * steps / total, "loss": iv.value, "lo": iv.lo, "hi": iv.hi})
    for why, runs in withheld.items():
        law.add_doubt(DoubtKind.UNDETERMINED, f"the trunks' curves do not determine {len(runs)} predicted cooldown(s) "
                      f"(of {', '.join(dict.fromkeys(runs))}): {why}")
    if withheld and not rows:
        return TrunkPredictions(empty, law, ["predicted cooldowns: none, the curve law across sizes does not determine "
                                             "them: " + "; ".join(withheld)])
    frame = pd.DataFrame(rows) if rows else empty
    matrix = np.column_stack(draws) if draws and len(draws[0]) else None
    notes = [f"{len(frame)} point(s) are final losses predicted, not trained: the cooldowns of {len(trunks)} trunk(s) "
             f"at their smaller budgets, by the {law.form_} curve law across sizes fitted to the trunks' curves "
             f"(N = {', '.join(size(n) for n in law.sizes_)})"]
    notes += [f"curve law across sizes: {n}" for n in law.notes_]
    largest = max((c for _, c, _ in trunks), key=lambda c: (float(c.N), c.lr.size))  # type: ignore[arg-type]
    recipe = (float(np.max(largest.lr)), float(largest.D or 0) / largest.lr.size, warmup_end(largest.lr) / largest.lr.size,
              int(largest.lr.size))
    return TrunkPredictions(frame.reset_index(drop=True), law, notes, recipe, matrix)


#: Why a predicted loss has no interval, by its kind (:class:`~scaling.fmt.Interval`), in one note for all alike.
NO_INTERVAL_WHY = {"no spread": "their bootstrap replicates do not vary",
                   "unreliable": "their bootstrap replicates did not move from the fit (they agree far more closely "
                                 "than the evaluations' noise allows)",
                   "biased": "their bootstrap does not reproduce them"}


def undetermined(iv: Interval, bootstrapped: bool, doubted: bool) -> Optional[str]:
    """Why a predicted final loss is no point to fit (None: it is one): its bootstrap gives it no interval (its
    replicates do not vary, did not move from the fit, or do not reproduce it), its 95% interval is wider than
    ``UNDETERMINED_WIDTH`` of the loss, or no bootstrap was run for a law whose parameters are doubted."""
    if not (math.isfinite(iv.value) and iv.value > 0):
        return "no finite positive loss"
    if not bootstrapped:
        return "no bootstrap measures them, and the law's parameters are doubted" if doubted else None
    if iv.interval is None:
        return NO_INTERVAL_WHY.get(iv.kind, "their bootstrap gives them no interval")
    if iv.hi - iv.lo > UNDETERMINED_WIDTH * iv.value:  # type: ignore[operator]
        return f"their 95% interval is wider than {100 * UNDETERMINED_WIDTH:g}% of the loss"
    return None


def read_trunks(url: str, sweep: str, runs: Optional[pd.DataFrame] = None) -> Optional[list[Trunk]]:
    """A sweep's trunks whose cooldowns are predicted, each with its eval-loss curve (None: it has no such
    trunk); ``runs``: its completed runs with their specs, read already by the caller (else read here)."""
    from scaling import db

    with db.connect(url) as res:
        if runs is None:
            runs = res.runs(sweep=sweep, status=COMPLETED)
        if not len(runs):
            return None
        runs = runs[[bool(budgets(s)) if isinstance(s, dict) else False for s in runs["spec"]]]
        if not len(runs):
            return None
        m = res.metrics(run_keys=list(runs["run_key"]), names=[EVAL_LOSS], sweep=sweep)
    trunks = []
    for _, run in runs.iterrows():
        rows = m[m["run_key"] == run["run_key"]]
        curve = run_curve(str(run["run_key"]), run["spec"], rows["step"].to_numpy(), rows["value"].to_numpy(float),
                          float(run.get("N") or np.nan))
        if curve is not None:
            trunks.append((run["spec"], curve, float(run.get("C") or np.nan)))
    return trunks


def trunks_digest(trunks: Optional[list[Trunk]]) -> str:
    """A short digest of what the trunks' predictions are made from (their specs, sizes, compute and curves):
    equal trunks, equal digest, computed without fitting anything ("" without trunks)."""
    if trunks is None:
        return ""
    h = hashlib.sha256()
    for spec, curve, C in sorted(trunks, key=lambda t: t[1].run):
        h.update(json.dumps([spec, curve.run, curve.N, curve.D, C], sort_keys=True, default=str).encode())
        for values in (curve.steps, curve.loss, curve.lr):
            h.update(np.ascontiguousarray(np.asarray(values, float)).tobytes())
    return h.hexdigest()[:12]


def trunk_predictions(url: str, sweep: str, n_bootstrap: int = TRUNK_BOOTSTRAP, seed: int = 0) -> Optional[TrunkPredictions]:
    """The predicted cooldowns of a sweep's trunks (None when it has no trunk whose cooldowns are predicted)."""
    trunks = read_trunks(url, sweep)
    return None if trunks is None else trunk_predictions_of(trunks, n_bootstrap, seed)


def trunk_predictions_of(trunks: list[Trunk], n_bootstrap: int = TRUNK_BOOTSTRAP, seed: int = 0) -> TrunkPredictions:
    """:func:`trunk_predictions` of trunks read already (:func:`read_trunks`)."""
    if not trunks:
        return TrunkPredictions(pd.DataFrame(columns=["run", "N", "D", "C", "loss", "lo", "hi"]), None,
                                ["predicted cooldowns: none: no trunk has an eval-loss curve"])
    return predict_from_trunks(trunks, bootstrap=n_bootstrap, seed=seed)
