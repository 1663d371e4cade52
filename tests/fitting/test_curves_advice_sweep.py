"""A sweep's curve laws and the schedule advice for its recommended run: fitted with the analysis only at sizes
trained under two schedules, stored with it, and stated (or refused, saying why) in the closing answer and
`scaling recommend`'s text and JSON. The sweep is simulated from a known curve law (tests/curve_sweep.py)."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import curve_sweep  # noqa: E402

from scaling.fitting.curves.advice import DECAY_FRACTIONS, advice_lines, run_schedule_advice  # noqa: E402


@pytest.fixture
def swept(curve_sweep_analysis: tuple[str, Any]) -> tuple[str, Any]:
    return curve_sweep_analysis


def test_only_the_size_trained_under_two_schedules_gets_a_curve_law(swept) -> None:
    url, analysis = swept
    curves = analysis.curves
    assert len(curves.sizes) == 1, curves.sizes  # the other two sizes ran cosines only
    (size,) = curves.sizes.values()
    assert size.peak == pytest.approx(curve_sweep.PEAK) and size.batch == pytest.approx(curve_sweep.BATCH)
    assert size.longest == max(curve_sweep.STEPS) and len(size.law.runs_) == 5
    assert sum("one schedule shape" in line for line in curves.left_out) == 2
    # stored with the analysis and read back whole
    from scaling.fitting.analysis import fit_sweep

    again = fit_sweep(url, "curves", n_bootstrap=8, next_runs=False)
    assert again.reused and set(again.curves.sizes) == set(curves.sizes)
    assert again.curves.sizes[size.N].law.params_ == size.law.params_


def test_the_advice_at_the_fitted_size_names_the_best_schedule_with_intervals(swept) -> None:
    _, analysis = swept
    (size,) = analysis.curves.sizes.values()
    advice = run_schedule_advice(analysis.curves, size.N, 1400 * curve_sweep.BATCH)
    names = {"cosine"} | {f"wsd {int(100 * f)}% {d}" for f in DECAY_FRACTIONS for d in ("linear", "exponential")}
    assert set(advice["losses"]) == names and advice["steps"] == 1400 and advice["why_not"] is None
    for iv in advice["losses"].values():
        assert iv["value"] > 0 and (iv["lo"] is None or iv["lo"] <= iv["value"] <= iv["hi"])
    best = advice["best"]
    assert best is not None and advice["losses"][best]["value"] == min(v["value"] for v in advice["losses"].values())
    # the truth: a WSD decay ends lower than a cosine to the same floor under Luo et al.'s law at this length
    assert best.startswith("wsd")
    text = "\n".join(advice_lines(advice))
    assert f"schedule: {best}" in text and "cosine" in text and "linear" in text and "exponential" in text


def test_no_advice_from_another_size_or_far_beyond_the_fitted_lengths(swept) -> None:
    _, analysis = swept
    (size,) = analysis.curves.sizes.values()
    other = run_schedule_advice(analysis.curves, 3 * size.N, 1e6)
    assert "losses" not in other and "outside them" in other["why_not"]
    longer = run_schedule_advice(analysis.curves, size.N, 10 * size.longest * size.batch)
    assert "losses" not in longer and "longest curve" in longer["why_not"]
    none = run_schedule_advice(None, size.N, 1e6)
    assert "losses" not in none and none["why_not"].startswith("no curve law")


def test_a_law_doubted_for_its_design_gives_no_losses(swept) -> None:
    from dataclasses import replace

    from scaling.fitting.core.doubts import DoubtKind
    from scaling.fitting.curves.sweep import SweepCurves

    _, analysis = swept
    (size,) = analysis.curves.sizes.values()
    law = type(size.law).from_dict(size.law.to_dict())
    law.add_doubt(DoubtKind.FEW_POINTS, "unreliable: one curve only")
    flagged = SweepCurves({size.N: replace(size, law=law)})
    advice = run_schedule_advice(flagged, size.N, 1200 * curve_sweep.BATCH)
    assert "losses" not in advice and "not trusted" in advice["why_not"]


def test_the_closing_answer_and_recommend_state_the_schedule(swept) -> None:
    from scaling.fitting.brief import brief
    from scaling.orchestrator.expand import sweep_recommendation

    url, analysis = swept
    rec = sweep_recommendation(url, analysis)
    assert rec.schedule is not None and "why_not" in rec.schedule
    N = rec.target.N
    (size,) = analysis.curves.sizes.values()
    if abs(math.log(N / size.N)) > math.log(1.1):  # the recommended N is another size: said, not extrapolated
        assert rec.schedule.get("best") is None and "outside them" in rec.schedule["why_not"]
    assert any(line.strip().startswith("schedule:") for line in brief(rec)) or rec.chosen in rec.unreliable
    assert "schedule:" in rec.table()
    assert json.loads(json.dumps(rec.to_dict()))["schedule"]["why_not"] == rec.schedule["why_not"]


def test_a_sweep_of_one_schedule_has_no_curve_law_and_says_so(tmp_path: Path) -> None:
    """Cosines of two lengths at one size: one schedule shape, so no law is fitted and no curve is even read."""
    from scaling import vocab
    from scaling.db import Store
    from scaling.fitting.curves.sweep import NO_TWO_SCHEDULES, sweep_curves
    from scaling.trainer import train

    url = f"sqlite:///{tmp_path / 'one.db'}"
    runs = [curve_sweep.spec(16, s, {"kind": "cosine"}) for s in curve_sweep.STEPS[:2]]
    with Store(url) as store:
        store.register("one", [s.record() for s in runs])
        for s in runs:
            store.claim(s.key, "test:1", sweep="one")
            r = train(s, url, tmp_path, attempt=1, sweep="one")
            store.finish(s.key, vocab.COMPLETED, final_train_loss=r.final_train_loss,
                         final_eval_loss=r.final_eval_loss, sweep="one")
    curves = sweep_curves(url, "one")
    assert not curves.sizes and curves.why == NO_TWO_SCHEDULES
    assert run_schedule_advice(curves, 1e4, 1e6) == {"why_not": NO_TWO_SCHEDULES}


def test_the_curve_laws_read_the_sweeps_runs_once(swept, monkeypatch: pytest.MonkeyPatch) -> None:
    """Whether two schedules were trained and each run's curve are decided from one read of the runs."""
    from scaling.db.results import Results
    from scaling.fitting.curves.sweep import sweep_curves

    url, analysis = swept
    reads: list[dict[str, Any]] = []
    runs = Results.runs

    def counted(self: Results, *args: Any, **kwargs: Any) -> Any:
        reads.append(kwargs)
        return runs(self, *args, **kwargs)

    monkeypatch.setattr(Results, "runs", counted)
    curves = sweep_curves(url, "curves", 8)
    assert set(curves.sizes) == set(analysis.curves.sizes) and len(reads) == 1
