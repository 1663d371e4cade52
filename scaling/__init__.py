"""scaling: plan, train, record, fit and report scaling-law sweeps of language models.

The notebook API (``scaling.load_plan``, ``run_sweep``, ``connect``, ``fit``, ``recommend``,
``report``, and the typed results ``Estimate``, ``Fit``, ``FittedLaw``, ``Advice``) lives in
:mod:`scaling.api` and is imported on first use, so ``import scaling.fitting`` pulls in neither
torch nor Ray. ``scaling.figures`` is :mod:`scaling.reports.figures`; ``scaling.vocab`` names the
metrics, events and statuses.
"""

from __future__ import annotations

from typing import Any

API = ("load_plan", "run_sweep", "connect", "fit", "recommend", "report", "tasks", "Estimate", "Fit", "FittedLaw",
       "Advice", "Tasks", "TaskPrediction")

__all__ = ["__version__", *API, "figures", "vocab"]


def __getattr__(name: str) -> Any:
    # ``import a.b as c``, not ``from a import b``: the latter asks this very function for ``b`` first.
    if name == "__version__":  # also lazy: ``import scaling.vocab`` loads scaling.vocab alone
        import scaling.version as version

        return version.__version__
    if name in API:
        import scaling.api as api

        return getattr(api, name)
    if name == "figures":
        import scaling.reports.figures as figures

        return figures
    if name == "vocab":
        import scaling.vocab as vocab

        return vocab
    raise AttributeError(f"module 'scaling' has no attribute {name!r}")


def __dir__() -> list[str]:
    """The API names too (they load on first use), so a notebook's tab completion offers them."""
    return sorted({*globals(), *__all__})
