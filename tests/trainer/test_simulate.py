"""The simulated trainer: curves from a known Chinchilla law, stored like a trained run's, at any scale."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from scaling import vocab
from scaling.accounting import ShapePolicy
from scaling.errors import SpecError
from scaling.trainer.spec import RunSpec

LAW = {"E": 1.8, "A": 480.0, "B": 2100.0, "alpha": 0.35, "beta": 0.37}
BATCH = 4 * 1024 * 1024  # 2^22 tokens: whole sequences of the default context (256)


def sim_spec(N: float, D: float, *, noise: float = 0.005, seed: int = 0, law: dict | None = None, **extra) -> RunSpec:
    shape = ShapePolicy().shape_for(N)
    return RunSpec.from_dict({
        "model": shape.as_dict(), "tokens": int(D), "batch_tokens": extra.pop("batch_tokens", BATCH),
        "simulate": {"law": law or LAW, "noise": noise, "seed": seed}, **extra,
    })


def law_loss(N: float, D: float, t: dict = LAW) -> float:
    return t["E"] + t["A"] / N ** t["alpha"] + t["B"] / D ** t["beta"]


def stored_run(url: str, spec: RunSpec, sweep: str = "sim") -> None:
    from scaling.db import Store

    with Store(url) as store:
        store.register(sweep, [spec.record()])


def test_the_law_is_part_of_the_key_and_trained_runs_keep_theirs() -> None:
    base = sim_spec(1e8, 2e9)
    assert base.key != sim_spec(1e8, 2e9, law={**LAW, "alpha": 0.34}).key
    assert base.key != sim_spec(1e8, 2e9, noise=0.01).key
    assert base.key != sim_spec(1e8, 2e9, seed=1).key
    trained = base.model_copy(update={"simulate": None})
    assert "simulate" not in trained.key_fields()  # keys of runs that train for real are unchanged
    assert trained.key != base.key


def test_curve_ends_at_the_law_and_is_stored_like_a_trained_run(sqlite_url: str, tmp_path: Path) -> None:
    from scaling.db import connect
    from scaling.trainer import train

    spec = sim_spec(3e8, 6e9, noise=0.0)
    stored_run(sqlite_url, spec)
    result = train(spec, sqlite_url, tmp_path, attempt=1, sweep="sim")
    N, D = spec.n_params, spec.trained_tokens  # whole batches: D rounded up to one
    assert D >= spec.tokens and D % spec.batch_tokens == 0
    assert result.status == vocab.COMPLETED and result.steps == spec.steps
    assert result.final_eval_loss == pytest.approx(law_loss(N, D), rel=1e-12)
    with connect(sqlite_url) as res:
        m = res.metrics(run_keys=[spec.key], sweep="sim")
        events = res.events(sweep="sim", kinds=[vocab.SIMULATED])
    train_loss = m[m["name"] == vocab.TRAIN_LOSS].sort_values("step")
    assert len(train_loss) >= 20 and train_loss["step"].iloc[-1] == spec.steps
    assert np.all(np.diff(train_loss["value"].to_numpy()) < 0)  # noise-free: the law decreases with tokens
    assert train_loss["value"].iloc[-1] == pytest.approx(law_loss(N, D), rel=1e-12)
    seen = np.minimum(train_loss["step"].to_numpy() * spec.batch_tokens, D)
    assert np.allclose(train_loss["tokens"], seen)
    assert np.allclose(train_loss["value"], [law_loss(N, t) for t in seen], rtol=1e-12)
    assert len(events) == 1 and events["detail"].iloc[0]["law"] == LAW


def test_noise_is_seeded_by_the_run(sqlite_url: str, tmp_path: Path) -> None:
    from scaling.trainer.simulate import simulate

    a = simulate(sim_spec(1e8, 2e9), None, tmp_path)
    again = simulate(sim_spec(1e8, 2e9), None, tmp_path)
    other = simulate(sim_spec(1e8, 2e9, seed=7), None, tmp_path)
    assert a.final_eval_loss == again.final_eval_loss != other.final_eval_loss
    rel = [math.log(simulate(sim_spec(1e8, 2e9, seed=s), None, tmp_path).final_eval_loss / law_loss(
        sim_spec(1e8, 2e9).n_params, 2e9)) for s in range(200)]
    assert abs(np.mean(rel)) < 0.002 and 0.004 < np.std(rel) < 0.006  # ln(loss) ~ N(ln L, 0.005)


def test_a_run_at_1e24_flops_is_stored_without_overflow(sqlite_url: str, tmp_path: Path) -> None:
    """N near 1e12 and D near 1e13 (C ~ 6e25 FLOPs): 64-bit columns, step numbers and no memory check."""
    from scaling.db import connect
    from scaling.trainer import train

    spec = sim_spec(1e12, 1e13)
    assert spec.n_params > 5e11 and spec.flops > 1e24
    stored_run(sqlite_url, spec)
    result = train(spec, sqlite_url, tmp_path, attempt=1, sweep="sim")
    assert result.final_eval_loss == pytest.approx(law_loss(spec.n_params, spec.tokens), rel=0.05)
    with connect(sqlite_url) as res:
        run = res.run(spec.key, sweep="sim")
        m = res.metrics(run_keys=[spec.key], sweep="sim")
    assert run["N"] == spec.n_params and run["D"] == spec.trained_tokens
    assert m["tokens"].max() == spec.trained_tokens and m["step"].max() == spec.steps


def test_steps_beyond_the_database_are_refused() -> None:
    with pytest.raises(SpecError, match="steps"):
        sim_spec(1e12, 1e13, batch_tokens=4096)


def test_a_simulated_run_takes_one_worker_and_no_faults() -> None:
    with pytest.raises(SpecError, match="one worker"):
        sim_spec(1e8, 2e9, execution={"workers": 2, "strategy": "ddp"})
    with pytest.raises(SpecError, match="faults"):
        sim_spec(1e8, 2e9, faults={"raise_at_step": 3})


def test_simulating_imports_no_torch(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "from scaling.trainer import train\n"
        "from scaling.trainer.spec import RunSpec\n"
        f"spec = RunSpec.model_validate_json({sim_spec(1e9, 2e10).model_dump_json()!r})\n"
        f"train(spec, None, {str(tmp_path)!r})\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True,
                          env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr


def test_approach3_recovers_the_simulated_law(sqlite_url: str, tmp_path: Path) -> None:
    """A 6 x 6 grid of simulated runs through the database, fitted by approach 3: the truth within its intervals."""
    from scaling.db import Store
    from scaling.fitting.sweep_fit import fit_data
    from scaling.fitting.core.sweep_data import from_db
    from scaling.trainer import train

    specs = [sim_spec(N, D) for N in np.geomspace(1e7, 1e10, 6) for D in np.geomspace(1e9, 1e12, 6)]
    with Store(sqlite_url) as store:
        store.register("grid", [s.record() for s in specs])
        for s in specs:
            store.claim(s.key, "test:1", sweep="grid")
            r = train(s, sqlite_url, tmp_path, attempt=1, sweep="grid")
            store.finish(s.key, vocab.COMPLETED, final_train_loss=r.final_train_loss,
                         final_eval_loss=r.final_eval_loss, sweep="grid")
    data, _ = from_db(sqlite_url, "grid")
    assert len(data.points) == 36 and data.curves is not None and data.curves["run_key"].nunique() == 36
    law = fit_data(data, "approach3", n_bootstrap=100, seed=0, run_backtest=False).laws["approach3"]
    assert law.reliable(), law.doubts()
    ivs = law.intervals()
    for name in ("alpha", "beta", "E"):
        assert ivs[name].covers(LAW[name]), (name, ivs[name])
    from scaling.fitting.loss.synthetic import chinchilla_optimal_N

    C = 1e22
    iv = law.optimal_interval(C)["N"]
    assert iv.covers(float(chinchilla_optimal_N(C, LAW, law.k_)))


def test_runs_packed_in_one_task_are_written_together_and_fail_alone(sqlite_url: str) -> None:
    """A scheduler's task of simulated runs: every good run's rows and event, the same as one run
    alone writes; a run that cannot be simulated comes back as its error line, the others unharmed."""
    from scaling.db import Store, connect
    from scaling.orchestrator.worker import simulate_batch
    from scaling.trainer.simulate import simulate

    good = [sim_spec(1e8, 2e9), sim_spec(3e8, 6e9)]
    bad = good[0].model_copy(update={"simulate": None, "seed": 7})  # no law to draw from
    with Store(sqlite_url) as store:
        store.register("pack", [s.record() for s in (good[0], bad, good[1])])
        store.register("alone", [good[0].record()])
    out = simulate_batch([s.model_dump_json() for s in (good[0], bad, good[1])], [1, 1, 2], sqlite_url, "pack")
    assert out[1].error == "ValueError: simulate() needs a spec with a simulate section" and out[1].key == bad.key
    assert [(o.key, o.error) for o in (out[0], out[2])] == [(good[0].key, None), (good[1].key, None)]
    alone = simulate(good[0], sqlite_url, attempt=1, sweep="alone")
    assert out[0].final_eval_loss == alone.final_eval_loss
    with connect(sqlite_url) as res:
        packed = res.metrics(sweep="pack").sort_values(["run_key", "name", "step"])
        single = res.metrics(sweep="alone").sort_values(["run_key", "name", "step"])
        events = res.events(sweep="pack", kinds=[vocab.SIMULATED])
    assert set(packed["run_key"]) == {good[0].key, good[1].key}  # nothing for the run that failed
    first = packed[packed["run_key"] == good[0].key]
    assert np.array_equal(first["value"].to_numpy(), single["value"].to_numpy())
    assert sorted(events["run_key"]) == sorted(s.key for s in good)
    assert sorted(d["attempt"] for d in events["detail"]) == [1, 2]


def test_a_packed_write_that_fails_is_pinned_on_its_run(sqlite_url: str) -> None:
    """One run of a pack the database does not know (its write fails): the pack's shared write
    fails, each run is then written on its own, and only that run comes back as an error."""
    from scaling.db import Store, connect
    from scaling.trainer.simulate import simulate_many

    known, unknown = sim_spec(1e8, 2e9), sim_spec(3e8, 6e9)
    with Store(sqlite_url) as store:
        store.register("pack", [known.record()])
    out = simulate_many([(unknown, 1), (known, 1)], sqlite_url, sweep="pack")
    assert isinstance(out[0], str) and out[0].startswith("NotFoundError: run ") and unknown.key in out[0]
    assert out[1].key == known.key
    with connect(sqlite_url) as res:
        assert set(res.metrics(sweep="pack")["run_key"]) == {known.key}
        assert list(res.events(sweep="pack", kinds=[vocab.SIMULATED])["run_key"]) == [known.key]


def test_a_paced_run_writes_as_its_steps_pass_the_rows_and_key_of_an_unpaced_one(sqlite_url: str,
                                                                                    tmp_path: Path) -> None:
    """``simulate.pace``: the run is in flight for pace x steps, its early rows written before it ends;
    its key and every row are the unpaced run's, and a bad pace is refused."""
    import threading
    import time

    from scaling.db import connect
    from scaling.trainer import train

    plain = sim_spec(1e8, 2e9, batch_tokens=2**25)
    paced = RunSpec.from_dict({**plain.model_dump(mode="json"),
                               "simulate": {**plain.simulate.model_dump(mode="json"), "pace": 0.02}})
    assert paced.key == plain.key and "pace" not in plain.simulate.model_dump() and paced.steps >= 50
    stored_run(sqlite_url, paced)
    seen_mid_run: list[int] = []
    started = time.monotonic()
    worker = threading.Thread(target=train, args=(paced, sqlite_url, tmp_path), kwargs={"sweep": "sim"})
    worker.start()
    while worker.is_alive():
        with connect(sqlite_url) as res:
            seen_mid_run.append(len(res.metrics(run_keys=[paced.key], sweep="sim")))
        time.sleep(0.05)
    worker.join()
    assert time.monotonic() - started >= 0.02 * paced.steps
    with connect(sqlite_url) as res:
        rows = res.metrics(run_keys=[paced.key], sweep="sim").sort_values(["name", "step"])
    assert 0 < max(seen_mid_run) < len(rows)  # part of the curve was there before the run ended
    from scaling.trainer.simulate import simulated_run

    expected, _, _ = simulated_run(plain, None)
    assert sorted((r[0], r[3], r[4]) for r in expected) == sorted(zip(rows["step"], rows["name"], rows["value"]))
    for bad in (-1, float("nan"), 11):
        with pytest.raises(SpecError, match="simulate.pace"):
            RunSpec.from_dict({**plain.model_dump(mode="json"),
                               "simulate": {**plain.simulate.model_dump(), "pace": bad}})


def test_scaling_plan_estimates_a_paced_sweep_at_its_pace(tmp_path: Path) -> None:
    import json

    import yaml
    from cli_run import run_main

    plan = {"name": "paced", "runs_dir": str(tmp_path / "runs"),
            "model": {"aspect_ratio": 8, "head_size": 8, "vocab_size": 256, "context": 32},
            "train": {"batch_tokens": 256}, "grid": [{"models": [{"n_layer": 1, "d_model": 8, "n_head": 1}],
                                                     "tokens": [256 * 300, 256 * 500]}]}
    path = tmp_path / "paced.yaml"
    for pace, serial in ((0.01, 8.0), (0, 0.0)):
        path.write_text(yaml.safe_dump({**plan, "simulate": {"law": LAW, "pace": pace}}))
        got = run_main("plan", str(path), "--format", "json")
        assert got.code == 0, got.err
        summary = json.loads(got.out)
        assert [r["est_seconds"] for r in summary["runs"]] == pytest.approx([3.0, 5.0] if pace else [0, 0])
        assert summary["totals"]["est_seconds_serial"] == pytest.approx(serial)
