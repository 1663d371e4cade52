"""An analysis' conventions are one typed value (params, flops, k and how the data were counted), stored as
the flat mapping analyses have always stored: a stored analysis of any earlier form reads back."""

from __future__ import annotations

import pytest

from scaling.errors import FitError
from scaling.fitting import Settings, analyse
from scaling.fitting.analysis import Analysis, Conventions
from scaling.fitting.core.measurements import from_frame
from scaling.fitting.loss.synthetic import grid_points

#: The conventions as an analysis of a plain CSV stored them before they had a type.
STORED = {"params": "total", "flops": "6N_attention", "flops_per_param_token": 6.5, "effective_data": False,
          "unique_tokens": None}


def test_stored_conventions_read_back_typed_and_write_the_same_mapping() -> None:
    conv = Conventions.from_json(STORED)
    assert (conv.params, conv.flops, conv.k, conv.effective_data) == ("total", "6N_attention", 6.5, False)
    assert conv.to_json() == STORED


def test_an_older_mapping_takes_the_defaults_for_what_it_lacks_and_drops_what_is_unknown() -> None:
    conv = Conventions.from_json({"params": "non_embedding", "flops": "6N", "unique_tokens": 2e10,
                                  "r_star_fits": {"R*_D": {"status": "fitted", "value": 15.0}},
                                  "hparams": "tuned", "some_later_key": 1})
    assert conv.k == 6.0 and conv.unique_tokens == 2e10 and conv.hparams == "tuned"
    assert conv.r_star_fits["R*_D"]["value"] == 15.0
    assert "some_later_key" not in conv.to_json() and conv.to_json()["flops_per_param_token"] == 6.0


def test_conventions_that_are_not_a_mapping_are_refused() -> None:
    with pytest.raises(FitError, match="stored conventions must be a mapping"):
        Conventions.from_json(["params", "total"])  # type: ignore[arg-type]


def test_an_analysis_keeps_its_conventions_typed_through_its_json_and_reads_an_old_record() -> None:
    data = from_frame(grid_points(n_N=5, n_D=5, seed=1))
    analysis = analyse(data, Settings(law="approach3", n_bootstrap=0, tasks=False, next_runs=False))
    assert isinstance(analysis.conventions, Conventions)
    assert analysis.conventions.k == data.flops_per_param_token and analysis.k == analysis.conventions.k
    stored = analysis.to_json()
    assert stored["conventions"] == data.conventions()  # the flat mapping, as stored before
    back = Analysis.from_json(stored)
    assert back.conventions == analysis.conventions
    old = {**stored, "conventions": {"params": "non_embedding", "flops": "6N"}}  # k not yet stored
    assert Analysis.from_json(old).conventions.k == 6.0
