"""One entry point: fit the MoE forms a table supports, print them, recommend from them.

``fit_moe(data)`` fits every form whose variable the data give (granularity when a granularity
column does, sparsity when total parameters or experts do), or the one asked for; a form the data
cannot support is skipped with its reason unless it was the only one asked for.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from scaling.errors import FitError
from scaling.fitting.core.base import jsonable
from scaling.fitting.core.conventions import Conventions
from scaling.fitting.moe.moe_data import MoEData
from scaling.fitting.moe.moe_laws import FORMS, MoELaw
from scaling.fitting.recommend import default_budget
from scaling.fitting.moe.moe_recommend import MoERecommendation, recommend_moe, recommendations_table
from scaling.fmt import Interval, PlainText, num, se_text

#: What ``--law`` accepts for the MoE laws, and the forms each fits.
MOE_CHOICES: dict[str, tuple[str, ...]] = {"moe": tuple(FORMS), **{f"moe-{k}": (k,) for k in FORMS}}


@dataclass
class MoEFit:
    """The fitted MoE laws of one table, by form, and the forms skipped with why."""

    source: str
    n_points: int
    conventions: Conventions
    laws: dict[str, MoELaw] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return jsonable({"source": self.source, "n_points": self.n_points, "conventions": self.conventions.to_json(),
                         "laws": {k: law.to_dict() for k, law in self.laws.items()}, "skipped": self.skipped,
                         "notes": self.notes})

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "MoEFit":
        """:meth:`to_dict` read back (the laws restored by their form's class); FitError for a law of no form."""
        laws: dict[str, MoELaw] = {}
        for form, law in (d.get("laws") or {}).items():
            if form not in FORMS:
                raise FitError(f"a stored law of sparsity of no known form ({form!r})")
            laws[form] = FORMS[form].from_dict(law)  # type: ignore[assignment]
        return cls(source=str(d["source"]), n_points=int(d["n_points"]), conventions=Conventions.from_json(d.get("conventions") or {}),
                   laws=laws, skipped=dict(d.get("skipped") or {}), notes=[str(n) for n in d.get("notes") or []])

    def table(self) -> str:
        """Every fitted parameter with its bootstrap SE and 95% interval, and what doubts each law."""
        from rich.table import Table

        console = PlainText(width=110)
        conv = self.conventions
        console.print(f"{self.source}: {self.n_points} points (N = {conv.n_counts}, C = {conv.c_formula}"
                      + (f", S = {conv.sparsity}" if conv.sparsity else "") + ")")
        for note in self.notes:
            console.print(f"note: {note}")
        for form, law in self.laws.items():
            console.print(f"{law.law} law: {FORMULAS[form]}")
            t = Table(show_edge=False)
            for col in ("parameter", "value", "SE", "95% interval"):
                t.add_column(col, justify="left" if col == "parameter" else "right")
            for name, iv in law.reported_intervals().items():
                value = "not identified" if iv.kind == "not identified" else num(iv.value, 4, "-")
                t.add_row(name, value, se_text(iv), iv.text(4, value=False))
            console.print(t)
            boot = law.bootstrap_info_ or {"n": 0}
            console.print(f"  bootstrap: {boot.get('n', 0)} replicates" + (f", {boot['failed']} failed" if boot.get("failed") else ""))
            for line in law.notes_:
                console.print(f"  {line}")
            console.print()
        for form, why in self.skipped.items():
            console.print(f"moe-{form} law: not fitted: {why}")
        return console.text()

    def recommend(self, compute: float | None = None) -> tuple[list[MoERecommendation], dict[str, str]]:
        """Each law's recommendation at ``compute`` (default: 10x the largest measured budget), and the
        laws that give none with why; FitError (one line) when none gives one."""
        if not self.laws:
            raise FitError("no MoE law was fitted: " + "; ".join(f"{k}: {v}" for k, v in self.skipped.items()))
        if compute is None:
            compute = default_budget(max(law.c_range_[1] for law in self.laws.values()))
        recs, refused = [], {}
        for law in self.laws.values():
            try:
                recs.append(recommend_moe(law, compute))
            except FitError as exc:
                refused[law.law] = " ".join(str(exc).split())
        if not recs:
            raise FitError("; ".join(refused.values()))
        return recs, refused


    def headline(self, compute: float | None = None) -> tuple[MoERecommendation | None, str]:
        """The recommendation a sweep's answer leads with for its runs with experts (the first law that gives
        one at ``compute``), or None and why none does."""
        try:
            recs, _ = self.recommend(compute)
        except FitError as exc:
            return None, " ".join(str(exc).split())
        return recs[0], ""


#: Each form as printed above its table.
FORMULAS = {"granularity": "L = c + (g / G^gamma + a) / N^alpha + b / D^beta (Krajewski et al. 2024)",
            "sparsity": "L = c + a (1 - S)^delta / N^alpha + b / D^beta"}


def fit_moe(data: MoEData, law: str = "moe", n_bootstrap: int = 200, seed: int = 0, grid: str = "default") -> MoEFit:
    """Fit the MoE forms ``law`` names (:data:`MOE_CHOICES`) to ``data``, each with ``n_bootstrap`` replicates."""
    if law not in MOE_CHOICES:
        raise FitError(f"unknown MoE law {law!r} (use one of {', '.join(MOE_CHOICES)})")
    forms = MOE_CHOICES[law]
    out = MoEFit(source=data.source or "data", n_points=len(data.points), conventions=Conventions.of(data),
                 notes=list(data.notes))
    for form in forms:
        cls = FORMS[form]
        if not np.isfinite(data.values(cls.variable)).all():
            why = f"the data give no {cls.variable_text} ({cls().variable_hint()})"
            if len(forms) == 1:
                raise FitError(f"{data.source or 'the data'}: the {cls.law} law needs {cls.variable_text}: {why}")
            out.skipped[form] = why
            continue
        try:
            fitted = cls(grid=grid).fit(data)
            if n_bootstrap:
                fitted.bootstrap(n_bootstrap, seed)
        except FitError as exc:
            if len(forms) == 1:
                raise
            out.skipped[form] = " ".join(str(exc).split())
            continue
        out.laws[form] = fitted
    if not out.laws:
        raise FitError("no MoE law could be fitted: " + "; ".join(f"moe-{k}: {v}" for k, v in out.skipped.items()))
    return out

