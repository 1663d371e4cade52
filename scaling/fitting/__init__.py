"""Scaling-law fits: Kaplan et al. (2020) and Chinchilla's three approaches (Hoffmann et al. 2022).

One result: :func:`analyse` fits a sweep or a CSV once and returns an :class:`Analysis` (the loss,
hyperparameter and task laws, the recommendation at the default budget, the conventions, typed notes),
which every reader takes as it is.

Laws follow scikit-learn's estimator contract (``fit(df)`` returns self, fitted attributes end
in ``_``, ``predict(N, D)``, ``optimal(C)``, ``bootstrap(n, seed)``, ``to_dict``/``from_dict``).
Torch-free and Ray-free: it needs numpy, scipy and pandas only, and the database for sweeps.
"""

from __future__ import annotations

from scaling.errors import FitError
from scaling.fitting.analysis import Analysis, CsvSource, Settings, SweepSource, analyse, fit_csv, fit_sweep, source_of
from scaling.fitting.sweep_fit import KINDS, fit_data, from_dict
from scaling.fitting.core.backtest import backtest
from scaling.fitting.core.base import Law, NotFittedError
from scaling.fitting.core.measurements import FitData, effective_tokens, from_csv, from_frame
from scaling.fitting.core.sweep_data import from_db
from scaling.fitting.loss.envelope import ChinchillaEnvelope
from scaling.fitting.loss.isoflop import ChinchillaIsoFLOP
from scaling.fitting.loss.kaplan import KaplanLaw
from scaling.fitting.loss.parametric import ChinchillaParametric
from scaling.fitting.recommend import Recommendation, recommend

__all__ = [
    "FitError",
    "NotFittedError",
    "Law",
    "KaplanLaw",
    "ChinchillaEnvelope",
    "ChinchillaIsoFLOP",
    "ChinchillaParametric",
    "FitData",
    "Analysis",
    "Settings",
    "SweepSource",
    "CsvSource",
    "analyse",
    "source_of",
    "Recommendation",
    "KINDS",
    "from_dict",
    "from_csv",
    "from_db",
    "from_frame",
    "effective_tokens",
    "fit_data",
    "fit_csv",
    "fit_sweep",
    "recommend",
    "backtest",
]
