"""`precision: auto`: what it resolves to, where, the warning for a slow explicit choice, the stored spec.

The rules are tested with stubbed probe rates (a CPU with fast bf16 is not at hand, and the
answer must not depend on the machine running the tests); the probe itself is measured for real
once, on tiny matmuls. The CUDA rules stub ``torch.cuda``: these machines have no GPU.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Callable

import pytest
import torch

from scaling.trainer import mfu, precision
from scaling.trainer.resolve import Host, decide_precision as resolve
from scaling.trainer.resolve import resolve as resolve_run


def resolve_spec(request: Any) -> tuple[Any, Any]:
    """(spec, how its precision was chosen) of a request, its corpus left unread."""
    done = resolve_run(request, Host(data=False))
    return done.spec, done.precision

GFLOP = 1e9


@pytest.fixture
def rates(monkeypatch: pytest.MonkeyPatch) -> Callable[..., list[tuple[str, int]]]:
    """``rates(bf16=..., fp32=...)``: stub the probed CPU rates; returns the list of probes asked for."""

    def install(**table: float) -> list[tuple[str, int]]:
        asked: list[tuple[str, int]] = []

        def rate(name: str, threads: int) -> float:
            asked.append((name, threads))
            return table[name]

        monkeypatch.setattr(precision, "cpu_rate", rate)
        return asked

    return install


def test_the_real_probe_measures_both_precisions_once_and_caches_them(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("SCALING_CACHE_DIR", str(tmp_path))
    real, probed = mfu.probe_cpu_flops, []

    def tiny(dtype: torch.dtype, threads: int, seconds: float = 0.3, sizes: Any = None) -> float:
        probed.append(dtype)
        return real(dtype, threads, seconds=0.02, sizes=(32, 64))

    monkeypatch.setattr(mfu, "probe_cpu_flops", tiny)
    first = resolve("auto", "cpu")
    again = resolve("auto", "cpu")
    assert sorted(map(str, probed)) == ["torch.bfloat16", "torch.float32"]  # once each, then cached
    assert first == again and set(first.rates) == {"bf16", "fp32"} and min(first.rates.values()) > 1e6
    assert first.precision == ("bf16" if first.rates["bf16"] >= first.rates["fp32"] else "fp32")
    cached = json.loads((tmp_path / "peak_flops.json").read_text())
    assert sorted(cached.values()) == sorted(first.rates.values())  # the MFU probe's own cache file


def test_auto_on_a_cpu_takes_bf16_only_when_it_is_at_least_as_fast(rates) -> None:
    asked = rates(bf16=0.9 * GFLOP, fp32=70 * GFLOP)
    slow = resolve("auto", "cpu")
    assert slow.precision == "fp32" and slow.warning is None
    assert slow.reason == "auto: on this CPU bf16 matmuls 0.9 GFLOP/s against 70 GFLOP/s in fp32 per core"
    assert asked == [("bf16", 1), ("fp32", 1)]  # one core's rates, whatever the run's threads
    rates(bf16=70 * GFLOP, fp32=70 * GFLOP)
    assert resolve("auto", "cpu").precision == "bf16"
    rates(bf16=300 * GFLOP, fp32=70 * GFLOP)  # AMX
    assert resolve("auto", "cpu").precision == "bf16"


def test_an_explicit_slow_half_precision_is_kept_with_a_one_line_warning(rates) -> None:
    rates(bf16=0.9 * GFLOP, fp16=1.2 * GFLOP, fp32=70 * GFLOP)
    res = resolve("bf16", "cpu")
    assert res.precision == "bf16"
    assert res.warning == (
        "precision bf16 is slow on this CPU: bf16 matmuls 0.9 GFLOP/s against 70 GFLOP/s in fp32 per core; "
        "precision auto or fp32 trains faster"
    )
    assert "fp16 matmuls 1.2 GFLOP/s" in (resolve("fp16", "cpu").warning or "")
    rates(bf16=140 * GFLOP, fp32=70 * GFLOP)
    assert resolve("bf16", "cpu").warning is None


def test_fp32_and_explicit_cuda_choices_need_no_probe(rates) -> None:
    asked = rates()
    assert resolve("fp32", "cpu").precision == "fp32"
    assert resolve("fp16", "cuda").precision == "fp16" and resolve("bf16", "cuda").precision == "bf16"
    assert asked == []


def test_auto_on_cuda_is_bf16_where_native_else_fp16(monkeypatch: pytest.MonkeyPatch, rates) -> None:
    asked = rates()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    driver = resolve("auto", "cuda")  # planning a GPU sweep on a machine without one
    assert driver.precision == "bf16" and "assumed" in driver.reason
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "Tesla V100-SXM2-32GB")
    monkeypatch.setattr(precision, "cuda_has_native_bf16", lambda: False)
    assert resolve("auto", "cuda").precision == "fp16"
    assert resolve("auto", "auto").precision == "fp16"  # execution.device auto: the GPU when there is one
    monkeypatch.setattr(precision, "cuda_has_native_bf16", lambda: True)
    assert resolve("auto", "cuda").precision == "bf16"
    assert asked == []


def test_a_resolved_spec_is_keyed_by_the_precision_it_trains_in(make_spec, make_request, rates) -> None:
    rates(bf16=0.9 * GFLOP, fp32=70 * GFLOP)
    spec = make_request(execution={"device": "cpu"})
    assert spec.precision == "auto"  # a request's default
    resolved, res = resolve_spec(spec)
    assert resolved.precision == "fp32" and resolved.key == make_spec(precision="fp32", execution={"device": "cpu"}).key
    rates(bf16=300 * GFLOP, fp32=70 * GFLOP)
    assert resolve_spec(spec)[0].key == make_spec(precision="bf16", execution={"device": "cpu"}).key


def test_the_trainer_refuses_a_request_and_a_spec_left_at_auto(make_spec, make_request, tmp_path) -> None:
    """Precision is decided once, by the resolver, before a key exists: ``train()`` decides nothing."""
    from scaling.errors import SpecError
    from scaling.trainer import train

    with pytest.raises(SpecError, match=r"^a run request .* resolve it first \(scaling.trainer.resolve.resolve\)$"):
        train(make_request(precision="fp32"), None, tmp_path)
    with pytest.raises(SpecError, match=r"precision: auto is decided by the resolver"):
        make_spec(precision="auto")
    assert not (tmp_path / "checkpoints").exists()


def _plan(precision: str | None) -> dict[str, Any]:
    train: dict[str, Any] = {"batch_tokens": 1024}
    if precision:
        train["precision"] = precision
    return {
        "name": "auto",
        "model": {"aspect_ratio": 16, "head_size": 16, "context": 64},
        "train": train,
        "grid": [{"models": [1e4], "tokens": [1e6]}],
    }


def test_expansion_resolves_auto_and_stores_the_resolved_spec(rates, sqlite_url: str) -> None:
    from scaling.db import Store, connect
    from scaling.orchestrator.expand import expand
    from scaling.orchestrator.plan import Plan
    from scaling.orchestrator.planning import summarize
    from scaling.orchestrator.sweep import register

    rates(bf16=0.9 * GFLOP, fp32=70 * GFLOP)
    plan = Plan.from_dict(_plan(None))
    exp = expand(plan)
    fp32 = expand(Plan.from_dict(_plan("fp32")))
    assert [r.key for r in exp.runs] == [r.key for r in fp32.runs]  # auto keys by what it resolved to
    assert exp.notes == []
    summary = summarize(exp)
    assert summary["precision"]["resolved"] == "fp32" and "0.9 GFLOP/s" in summary["precision"]["reason"]
    assert summary["runs"][0]["precision"] == "fp32"
    with Store(sqlite_url) as store:
        register(store, plan, exp)
    (row,) = connect(sqlite_url).runs(sweep="auto").to_dict("records")
    assert row["run_key"] == exp.runs[0].key and row["spec"]["precision"] == "fp32"


def test_the_planner_times_runs_at_the_probed_rate_of_the_resolved_precision(rates) -> None:
    from scaling.orchestrator.expand import expand
    from scaling.orchestrator.plan import Plan
    from scaling.orchestrator.planning import summarize
    from scaling.trainer.resolve import CPU_PEAK_FRACTION

    rates(bf16=0.9 * GFLOP, fp32=70 * GFLOP)
    fast = summarize(expand(Plan.from_dict(_plan(None))))
    slow = summarize(expand(Plan.from_dict(_plan("bf16"))))
    assert fast["totals"]["throughput_flops_per_worker"] == CPU_PEAK_FRACTION * 70 * GFLOP
    assert slow["totals"]["throughput_flops_per_worker"] == CPU_PEAK_FRACTION * 0.9 * GFLOP
    assert slow["runs"][0]["est_seconds"] > 5 * fast["runs"][0]["est_seconds"]


def test_scaling_plan_prints_the_slow_bf16_warning_on_one_line(
    rates, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import yaml

    from scaling.cli import main

    rates(bf16=0.9 * GFLOP, fp32=70 * GFLOP)
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(_plan("bf16")))
    monkeypatch.setattr(sys, "argv", ["scaling", "plan", str(path)])
    main()
    out = capsys.readouterr().out
    (line,) = [x for x in out.splitlines() if "slow" in x]
    assert line == (
        "note: precision bf16 is slow on this CPU: bf16 matmuls 0.9 GFLOP/s against 70 GFLOP/s in fp32 per core; "
        "precision auto or fp32 trains faster"
    )
    assert "precision bf16 (as requested)" in " ".join(out.split())


def test_a_stored_plan_left_at_auto_still_suggests_a_run() -> None:
    from scaling.orchestrator.expand import size_run

    auto = size_run(_plan(None), N=1e5, D=1e7, C=6e12)
    assert auto["memory_gib"] == size_run(_plan("fp32"), N=1e5, D=1e7, C=6e12)["memory_gib"]


def test_scaling_train_stores_the_resolved_precision_and_warns_on_stderr(
    make_request, rates, sqlite_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from scaling.db import connect
    from scaling.trainer.adhoc import train_adhoc

    rates(bf16=0.9 * GFLOP, fp32=70 * GFLOP)
    one_step = {"tokens": 32 * 8, "execution": {"device": "cpu"}}
    auto = train_adhoc(make_request(**one_step), sqlite_url, tmp_path / "a")
    assert capsys.readouterr().err == ""
    named = train_adhoc(make_request(precision="bf16", **one_step), sqlite_url, tmp_path / "b")
    assert capsys.readouterr().err.splitlines() == [
        "warning: precision bf16 is slow on this CPU: bf16 matmuls 0.9 GFLOP/s against 70 GFLOP/s in fp32 per core; "
        "precision auto or fp32 trains faster"
    ]
    stored = {r["run_key"]: r["spec"]["precision"] for r in connect(sqlite_url).runs(sweep="adhoc").to_dict("records")}
    assert stored == {auto.key: "fp32", named.key: "bf16"}


def test_fp16_with_tensor_parallelism_on_one_data_parallel_rank_is_refused(make_spec, make_request, monkeypatch,
                                                                          rates) -> None:
    """Its loss scaler cannot unscale DTensor and plain gradients together: refused in one line,
    whether fp16 was asked for or ``auto`` chose it for a GPU without bf16."""
    from scaling.errors import SpecError

    gpus = {"device": "cuda", "gpus_per_worker": 1}
    with pytest.raises((SpecError, ValueError), match=r"fp16 cannot run with tp=2 on one data-parallel rank"):
        make_spec(precision="fp16", execution={"workers": 2, "tp": 2, **gpus})
    make_spec(precision="bf16", execution={"workers": 2, "tp": 2, **gpus})  # bf16 has no scaler
    make_spec(precision="fp16", execution={"workers": 4, "tp": 2, "strategy": "zero3", **gpus})  # FSDP2: all DTensors
    # A GPU without bf16 is a property this machine lacks: the device query is what is replaced.
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "Tesla V100-SXM2-32GB")
    monkeypatch.setattr(precision, "cuda_has_native_bf16", lambda: False)
    auto = make_request(execution={"workers": 2, "tp": 2, **gpus})
    with pytest.raises(SpecError, match=r"^precision: auto chose fp16 \(auto: Tesla V100.*fp16 cannot run with tp=2"):
        resolve_spec(auto)
