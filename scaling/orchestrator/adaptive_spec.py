"""A plan's ``adaptive`` block: add IsoFLOP slices until N* is known well enough, within a budget.

The loop itself is `scaling.orchestrator.adaptive`; this module is only its schema, so the plan
can hold it without importing the loop.
"""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field

from scaling.schema import StrictModel
from scaling.trainer.sections import EarlyStopSpec

#: Slices one adaptive sweep may add before it stops whatever its target and budget say.
MAX_ROUNDS = 50


class _Strict(StrictModel):
    """The adaptive block's sections (:class:`scaling.schema.StrictModel`)."""


class AdaptiveTarget(_Strict):
    """When N* is known well enough: the 95% interval of ``quantity`` at ``at_compute`` spans at most
    a factor ``interval_ratio`` (upper / lower end), from a fit no note calls unreliable."""

    law: Literal["approach2", "approach3"] = Field(default="approach2", description="the law whose N* must be known")
    quantity: Literal["N_opt"] = Field(default="N_opt", description="what must be known (N*)")
    at_compute: float = Field(gt=0, description="FLOPs at which N* must be known")
    interval_ratio: float = Field(gt=1, description="upper / lower end of the 95% interval")
    # reported: the interval the fit reports (bootstrap, widened beyond the data by the backtest's
    # model error); bootstrap: the parameters' bootstrap interval alone.
    interval: Literal["reported", "bootstrap"] = Field(default="reported",
                                                       description="reported: the fit's reported interval; bootstrap: the parameters' bootstrap alone")


class AdaptivePlan(_Strict):
    """``adaptive: {target: {...}, max_compute: 3e18, batch: 5}``.

    The plan's ``grid`` is the first round; after it the orchestrator refits the target law and,
    while the target is not met, adds the IsoFLOP slice the platform's ranking
    (`scaling.fitting.recommend.candidate_runs`) says narrows the interval most per FLOP, with
    ``batch`` sizes bracketing the current N* estimate, as long as the sweep's total compute stays
    within ``max_compute``.
    """

    target: AdaptiveTarget = Field(description="when N* is known well enough")
    max_compute: float = Field(gt=0, description="FLOPs the whole sweep may spend, its grid included")
    batch: int = Field(default=5, ge=3, le=25, description="model sizes per added slice")
    span: float = Field(default=1.0, gt=0, le=3, description="ln of the factor between the smallest size and N*")
    max_rounds: int = Field(default=20, ge=1, le=MAX_ROUNDS, description="slices added at most")
    n_bootstrap: int = Field(default=200, ge=20, le=2000, description="replicates of each refit")
    # Every run of the sweep (its grid and each added slice) may then stop early; its key includes
    # the rule, so a sweep without it trains each of these runs in full.
    early_stop: Optional[EarlyStopSpec] = Field(default=None, description="stop a run once its final loss is "
                                                                          "predicted within a tolerance")
