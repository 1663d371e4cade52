"""`scaling compare` reads each sweep's analysis and fits nothing of its own: on two sweeps whose analyses
are stored, in the same conventions, every way to fit a law (loss, hyperparameter, task, curve laws) or to
compare laws refuses, and the page and the JSON are still written, with the stored laws' exponents."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest

import report_synth as S
from cli_run import run_cli
from scaling.fitting import fit_sweep

BUDGETS = (1e13, 3e13, 1e14, 3e14)


def _refuse_every_fit(monkeypatch: pytest.MonkeyPatch) -> None:
    from scaling.fitting import analysis, sweep_fit
    from scaling.fitting.core import base
    from scaling.fitting.curves import sweep as curves_sweep
    from scaling.fitting.hyperparams import hparams
    from scaling.fitting.tasks import task_laws

    recommend = importlib.import_module("scaling.fitting.recommend")

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the comparison fitted a law or compared laws")

    for owner, name in ((analysis, "_fit"), (sweep_fit, "fit_data"), (sweep_fit, "fit_one"), (base.Law, "fit"),
                        (hparams, "fit_law"), (hparams, "fit_hparams"), (task_laws, "fit_tasks"),
                        (task_laws, "fit_task"), (curves_sweep, "sweep_curves"), (recommend, "compare_laws")):
        monkeypatch.setattr(owner, name, refuse)


@pytest.mark.parametrize("mode", ["sweep", "stored"])
def test_compare_of_stored_sweeps_fits_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str) -> None:
    url = f"sqlite:///{tmp_path / 'compare.db'}"
    S.build(url, S.SweepSpec(sweep="base", budgets=BUDGETS, seed=0))
    S.build(url, S.SweepSpec(sweep="same", budgets=BUDGETS, seed=1))
    stored = {s: fit_sweep(url, s, n_bootstrap=30) for s in ("base", "same")}
    _refuse_every_fit(monkeypatch)
    page, out = tmp_path / "compare.html", tmp_path / "compare.json"
    code, stdout, stderr = run_cli("compare", "base", "same", "--db", url, "--fit", mode, "-o", str(page),
                                   "--json", str(out))
    assert code == 0, stdout + stderr
    assert page.is_file() and "approach3" in page.read_text()
    written = json.loads(out.read_text())
    assert [s["sweep"] for s in written["sweeps"]] == ["base", "same"]
    for side in written["sweeps"]:  # every law the stored analysis has, and only those
        assert side["laws"] == sorted(stored[side["sweep"]].laws)
    alpha = {r["sweep"]: r["value"] for r in written["exponents"] if r["law"] == "approach3" and r["exponent"] == "alpha"}
    for sweep, analysis in stored.items():  # the exponents are the stored analysis' own
        assert alpha[sweep] == pytest.approx(analysis.laws["approach3"].reported_intervals()["alpha"].value, rel=1e-12)
    assert any(r["law"] == "approach3" and r["exponent"] == "alpha" for r in written["differences"])
