"""The report's section on a sweep of mixtures of experts: the laws of sparsity the sweep's analysis
fitted (scaling.fitting.moe), which N they count, and what they recommend against the dense optimum.

It shows the stored analysis' laws and fits nothing; the recommendation is each law evaluated at the
default budget (10x the largest measured), as `scaling recommend --law moe` gives it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from scaling.errors import FitError
from scaling.fitting.moe.moe_fit import FORMULAS
from scaling.fmt import escape as e
from scaling.fmt import size
from scaling.reports.blocks import Answer, Page, answer_grid, interval, kv, missing, section

if TYPE_CHECKING:
    from scaling.fitting.moe.moe_fit import MoEFit
    from scaling.reports.report_data import ReportData

#: The convention every law of sparsity states, in the report's words.
N_CONVENTION = ("N counts the active parameters: those a token uses (attention, the router, its top-k and shared "
                "experts, the dense blocks); N_total counts every expert")


def moe_headline(fit: "MoEFit", compute: float) -> str:
    """The first screen's answer for the sweep's runs with experts at ``compute``: which law of sparsity,
    N_active*, the experts' cut and D* with their intervals (or why there is none), linked to the section."""
    best, why = fit.headline(compute)
    if best is None:
        return missing(f"Mixture of experts: no recommendation at this budget: {why}")
    cut = best.VARIABLE_TEXT.get(best.variable, best.variable)
    cells: list[tuple[str, Interval, Any, int]] = [
        ("N_active* (parameters)", best.N, size, 3), (cut, best.choice, None, 3), ("D* (tokens)", best.D, size, 3),
        ("predicted loss", best.loss, None, 4), ("loss saved against dense", best.gain, None, 3)]  # a loss as fmt.loss
    answers = [Answer(label, interval(iv, digits, fmt=fmt) if fmt else interval(iv, digits), "#moe")
               for label, iv, fmt, digits in cells]
    return (f'<div class="headline"><span class="answer">Mixture of experts at the same budget, recommended by the '
            f"{e(best.law)} law (a law of sparsity; N counts the active parameters):</span>{answer_grid(answers, 'answer-moe')}"
            f'<span class="why">Compared with {e(best.dense_label)} of the same law; 95% intervals in brackets.'
            "</span></div>")


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
        params = [(name, "not identified" if iv.kind == "not identified" else interval(iv, 4))
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
