"""Cooldown branches in the fits and the report: each branch is an (N, D) point, its trunk is not,
and the report's N-D figure draws branch points with their own marker."""

from __future__ import annotations

import numpy as np

from scaling.db import Store, connect
from scaling.trainer.optim import decay_start
from scaling.trainer.spec import RunSpec
from scaling.trainer.sections import ScheduleSpec

from report_synth import true_loss

BATCH = 512
WSD = ScheduleSpec(kind="wsd", decay_fraction=0.2)


def _lineage(d_model: int, budgets: list[int]) -> tuple[RunSpec, list[RunSpec]]:
    """A trunk and its branches at ``budgets`` steps, as the expansion builds them."""
    model = {"n_layer": 2, "d_model": d_model, "n_head": d_model // 16, "context": 32}
    points = [decay_start(steps, WSD) for steps in budgets]
    trunk = RunSpec(model=model, tokens=max(points) * BATCH, batch_tokens=BATCH,
                    schedule={"kind": "constant"}, execution={"keep_steps": tuple(points)})
    branches = [
        RunSpec(model=model, tokens=steps * BATCH, batch_tokens=BATCH, schedule=WSD,
                branch={"parent": trunk.key, "from_step": start})
        for steps, start in zip(budgets, points)
    ]
    return trunk, branches


def test_branches_are_points_and_trunks_are_not(sqlite_url: str) -> None:
    from scaling.fitting.core.sweep_data import from_db
    from scaling.fitting.loss.parametric import ChinchillaParametric
    from scaling.reports import figures as F
    from scaling.reports.report_data import ReportData

    specs, trunks, branches = [], [], []
    for d in (16, 32, 48):
        trunk, mine = _lineage(d, [40, 80, 160])
        trunks.append(trunk)
        branches += mine
        specs += [trunk, *mine]
    plain = RunSpec(model={"n_layer": 2, "d_model": 64, "n_head": 4, "context": 32}, tokens=120 * BATCH,
                    batch_tokens=BATCH)
    specs.append(plain)
    with Store(sqlite_url) as store:
        store.register("br", [s.record() for s in specs])
        for s in specs:
            store.claim(s.key, "test", sweep="br")
            store.finish(s.key, "completed", final_eval_loss=float(true_loss(s.n_params, s.tokens)), sweep="br")

    data, _ = from_db(sqlite_url, "br")
    assert len(data.points) == len(branches) + 1  # every branch and the plain run; no trunk
    assert sorted(data.points["D"]) == sorted([float(s.tokens) for s in branches + [plain]])

    report = ReportData(sweep="br", runs=connect(sqlite_url).runs(sweep="br"))
    roles = dict(zip(report.runs["run_key"], report.runs["role"]))
    assert {roles[t.key] for t in trunks} == {"trunk"}
    assert {roles[b.key] for b in branches} == {"branch"} and roles[plain.key] == ""
    assert set(report.completed["run_key"]) == {s.key for s in branches + [plain]}

    law = ChinchillaParametric(grid="coarse").fit(data)
    fig = F.parametric_contour(law, report.runs)  # trunks are dropped by the figure itself too
    traces = {t.name: t for t in fig.data if t.type == "scatter" and t.mode == "markers"}
    assert traces["branch points"].marker.symbol == "diamond" and traces["runs"].marker.symbol == "circle"
    assert sorted(np.asarray(traces["branch points"].y)) == sorted(float(b.tokens) for b in branches)
    assert list(traces["runs"].y) == [float(plain.tokens)]
