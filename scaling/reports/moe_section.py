"""The report's section on a sweep of mixtures of experts: the laws of sparsity the sweep's analysis
fitted (scaling.fitting.moe), which N they count, and what they recommend against the dense optimum.

It shows the stored analysis' laws and fits nothing; the recommendation is each law evaluated at the
default budget (10x the largest measured), as `scaling recommend --law moe` gives it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from scaling.errors import FitError
from scaling.fitting.moe.moe_fit import FORMULAS
from scaling.fmt import escape as e
from scaling.reports.blocks import Page, interval, kv, missing, section

if TYPE_CHECKING:
    from scaling.reports.report_data import ReportData

#: The convention every law of sparsity states, in the report's words.
N_CONVENTION = ("N counts the active parameters: those a token uses (attention, the router, its top-k and shared "
                "experts, the dense blocks); N_total counts every expert")


def moe_section(data: "ReportData", page: Page) -> str:
    """The laws of sparsity of the sweep's analysis ('' for a sweep without experts)."""
    fit = data.sweep_fit.moe if data.sweep_fit is not None else None
    if fit is None:
        return ""
    conv = fit.conventions
    rows = [("N", e(N_CONVENTION)), ("C", e(conv.c_formula or "")),
            *((("sparsity S", e(conv.sparsity)),) if conv.sparsity else ()),
            *((("granularity G", e(conv.granularity)),) if conv.granularity else ())]
    parts = [kv(rows)]
    for form, law in fit.laws.items():
        verdict = "" if law.reliable() else " (flagged: nothing is recommended from it)"
        params = [(name, "not identified" if iv.get("kind") == "not identified" else interval(iv, 4))
                  for name, iv in law.reported_intervals().items()]
        parts.append(f"<h3>{e(law.law)} law{e(verdict)}</h3><p><code>{e(FORMULAS[form])}</code></p>{kv(params)}")
        parts += [f'<p class="small">{e(line)}</p>' for line in law.notes_]
    parts += [missing(f"moe-{form} law: not fitted: {why}") for form, why in fit.skipped.items()]
    try:
        recs, refused = fit.recommend()
    except FitError as exc:
        parts.append(missing(f"No recommendation: {' '.join(str(exc).split())}"))
    else:
        for rec in recs:
            parts.append("<pre>" + e("\n".join(rec.lines())) + "</pre>")
        parts += [missing(f"{law} law: no recommendation: {why}") for law, why in refused.items()]
    return section("moe", "Laws of sparsity (mixture of experts)", "\n".join(parts))
