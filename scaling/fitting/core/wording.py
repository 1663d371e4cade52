"""One-line wording shared by the answer a sweep ends with (:mod:`scaling.fitting.brief`) and
``scaling recommend``'s table (:meth:`scaling.fitting.recommend.Recommendation.table`): a fit note cut
to one line, and the concrete run with where each of its values comes from.
"""

from __future__ import annotations

import math
import re
from typing import Any

from scaling.fitting.core.doubts import Doubt
from scaling.fmt import bounds, num, size

#: About the most characters of a left-out law's reason shown on its line (the full notes: ``scaling fit``);
#: a reason at most :data:`REASON_SLACK` longer is shown whole rather than cut a word or two short.
REASON_CHARS = 110
REASON_SLACK = 20
#: Advice that closes some fit notes; "left out" already says it.
_ADVICE = re.compile(r"[;:,]\s*do not trust\b.*$")


def short_reason(text: str, limit: int = REASON_CHARS) -> str:
    """A reason on one line (a doubt's :attr:`~scaling.fitting.core.doubts.Doubt.reason`, without its verdict):
    no closing advice, cut at a word near ``limit``."""
    said = text.reason if isinstance(text, Doubt) else text
    text = " ".join(str(said).split())
    text = _ADVICE.sub("", text)
    if len(text) <= limit + REASON_SLACK:
        return text
    cut = text.rfind(" ", 0, limit)
    return text[: cut if cut > limit // 2 else limit].rstrip(" ,;:(") + " …"


def run_line(run: dict[str, Any], run_source: str | None, hparams: dict[str, Any] | None = None) -> str:
    """The concrete run on one line, each value with where it comes from: the shape from
    ``run_source`` (the plan's rules or the defaults); lr and batch from the fitted lr* and B* laws
    where they set them (the run then carries ``lr_interval``/``batch_tokens_interval``), else from
    ``run_source`` with the reason the laws give none (``hparams``: what they recommended, None for a
    sweep without hyperparameter groups)."""
    source = run_source or "the plan"
    shape = run.get("shape") or {}
    dims = ", ".join(f"{k} {shape[k]}" for k in ("n_layer", "d_model", "n_head") if k in shape)
    parts = [f"{dims} (shape from {source})" if dims else "", f"N = {size(run.get('n_params'))}"]
    fallback: list[tuple[str, str]] = []  # (value, why the laws give none): from run_source
    for q, key, law, unit, write in (("lr", "lr", "lr*", "", num), ("batch", "batch_tokens", "B*", " tokens", size)):
        if run.get(key) is None:
            continue
        value = f"{q} {write(run[key])}{unit}"
        ends = run.get(f"{key}_interval")
        if ends is not None:
            lo, hi = (float(b) for b in ends)
            span = f" {bounds(lo, hi, fmt=write)}" if math.isfinite(lo) and math.isfinite(hi) and lo < hi else ""
            parts.append(f"{value}{span} (from the fitted {law} law)")
        elif hparams is None:  # no hyperparameter groups, so no lr* or B* law
            fallback.append((value, "the sweep has no hyperparameter groups to fit {it} from"))
        else:
            why = hparams.get(f"{q}_why")
            fallback.append((value, f"the {law} law gives none ({short_reason(why, 60)})" if why else ""))
    if len(fallback) == 2 and fallback[0][1] == fallback[1][1]:  # one reason for both: said once
        why = fallback[0][1].format(it="them")
        parts.append(f"{fallback[0][0]}, {fallback[1][0]} (both from {source}" + (f": {why})" if why else ")"))
    else:
        parts += [f"{value} (from {source}" + (f": {why.format(it='it')})" if why else ")") for value, why in fallback]
    if run.get("memory_gib") is not None:
        parts.append(f"{num(run['memory_gib'])} GiB per worker")
    if run.get("strategy"):
        parts.append(f"strategy {run['strategy']}")
    return ", ".join(p for p in parts if p)
