"""Loss curves in their learning-rate schedule: the multi-power law (Luo et al. 2025) and the annealing
law (Tissue et al. 2024), fitted to every evaluation of a few runs, predicting any schedule's curve.

``schedule`` rebuilds a run's rate at every step, ``laws`` holds the two forms with their bounds,
starts and derivatives, ``data`` reads curves (a CSV, a sweep), ``fit`` is the estimator
(:class:`CurveLaw`), ``joint`` the law across model sizes (:class:`JointCurveLaw`), ``advice`` compares schedules for one run, ``synthetic`` draws curves from a
known law. See docs/curves.md.
"""

from scaling.fitting.curves.data import Curve, Schedule, curves_from_csv, curves_from_db, schedules_from_csv
from scaling.fitting.curves.fit import CurveLaw, CurveLaws, fit_curves
from scaling.fitting.curves.joint import JointCurveLaw, fit_joint

__all__ = ["Curve", "CurveLaw", "CurveLaws", "JointCurveLaw", "Schedule", "curves_from_csv", "curves_from_db", "fit_curves", "fit_joint", "schedules_from_csv"]
