"""Learning rate and batch transferred from another sweep's fitted laws: ``rules: {lr: {fitted: SWEEP}}``.

A sweep of small budgets with ``hparams`` groups gives the laws lr*(N, D) = c N^a D^b and
B*(D) = d D^e (`scaling.fitting.hyperparams.hparams`, Step Law's forms). A plan whose rule names that sweep is
sized by them: when the plan is expanded, the rule becomes the law written out as an expression of
N and D with the fitted values, so every run's tags record the law it was sized by, ``factors``
sweep around it, and the plan stored with the sweep says what was trained. A law the groups do not
determine (flagged), a sweep without groups, or one counting N another way transfers nothing: the
plan is refused in one line saying why.

The law is frozen when the sweep is first registered: the plan stored with it holds the rule
written out, and a re-run of the plan reads that (:func:`frozen_expressions`), so a source sweep
that gains runs later does not move this sweep's learning rates under it. ``--refresh-transfer``
refits the law on the source sweep as it is now and records the new one.
"""

from __future__ import annotations

from typing import Optional

from pydantic import Field, field_validator

from scaling.errors import PlanError, UserError
from scaling.naming import name_problem
from scaling.schema import StrictModel, checked

#: The law of :mod:`scaling.fitting.hyperparams.hparams` each rule takes, and how it is written as a rule.
LAWS = {"lr": "lr_ND", "batch_tokens": "batch_D"}


class FittedRule(StrictModel):
    """``{fitted: SWEEP}``: the law fitted over that sweep's hyperparameter groups (read from ``db``,
    by default the database the plan's own sweep is recorded in)."""

    fitted: str = Field(description="the sweep whose hyperparameter groups the law is fitted on")
    db: Optional[str] = Field(default=None, description="its database (default: the plan's sweep's own)")

    @field_validator("fitted")
    @classmethod
    def _a_sweep_name(cls, value: str) -> str:
        return checked(value, name_problem(value))


def law_expressions(url: str, sweep: str, fields: tuple[str, ...], params_convention: str) -> dict[str, str]:
    """Each of ``fields`` (``lr``, ``batch_tokens``) as the expression of the law fitted on ``sweep``.

    Raises :class:`PlanError` (without a place: the caller adds the rule's) when the sweep cannot
    be read, counts N in another convention, has no groups, or its law is not fitted or flagged.
    """
    from scaling.db import connect
    from scaling.fitting.core.sweep_data import fitted_runs
    from scaling.fitting.hyperparams.hparams import fit_hparams, runs_frame

    try:
        with connect(url) as res:
            conventions = res.sweeps().set_index("sweep")
            if sweep not in conventions.index:
                raise PlanError(f"the database has no sweep {sweep!r} to take the law from (train it first)")
            runs = fitted_runs(res.runs(sweep=sweep, spec=False))
    except PlanError:
        raise
    except UserError as exc:
        raise PlanError(f"cannot read sweep {sweep!r}: {exc}") from None
    theirs = conventions.loc[sweep, "params_convention"]
    if theirs != params_convention:
        raise PlanError(f"sweep {sweep!r} counts N as {theirs!r}, this plan as {params_convention!r}: its law would "
                        "size these runs wrongly")
    fit = fit_hparams(runs_frame(runs))
    if fit is None:
        raise PlanError(f"sweep {sweep!r} has no completed hyperparameter groups to fit a law on")
    out: dict[str, str] = {}
    for field in fields:
        name = LAWS[field]
        law = fit.laws.get(name)
        if law is None:
            raise PlanError(f"sweep {sweep!r} gives no {field} law: {fit.skipped.get(name, 'not fitted')}")
        if not law.reliable():
            raise PlanError(f"the law {law.form} of sweep {sweep!r} is flagged ({law.doubts()[0]}): nothing is "
                            "transferred from it")
        p = {k: float(v.value) for k, v in law.params.items()}
        out[field] = (f"{p['c']!r} * N ** {p['a']!r} * D ** {p['b']!r}" if field == "lr"
                      else f"{p['d']!r} * D ** {p['e']!r}")
    return out


def frozen_expressions(url: str, sweep: str) -> dict[str, str]:
    """The rules (``lr``, ``batch_tokens``) written out when ``sweep`` was first registered in the
    database at ``url``, from the plan stored with it; empty when it is not registered (or no database yet)."""
    from scaling.db import connect
    from scaling.db.engine import is_sqlite, sqlite_path

    path = sqlite_path(url)
    if is_sqlite(url) and (path is None or not path.is_file() or path.stat().st_size == 0):
        return {}  # no database yet: opening it would create one
    try:
        with connect(url) as res:
            if sweep not in set(res.sweeps()["sweep"]):
                return {}
            stored = res.sweep_info(sweep).get("plan")
    except UserError:
        return {}  # a database it cannot read is refused where the sweep opens it
    rules = stored.get("rules") if isinstance(stored, dict) else None
    if not isinstance(rules, dict):
        return {}
    return {name: rules[name] for name in LAWS if isinstance(rules.get(name), str)}
