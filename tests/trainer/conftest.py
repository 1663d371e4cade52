"""Fixtures for the trainer's tests: tiny specs, one thread, a fixed peak (no probe)."""

from __future__ import annotations

from typing import Any, Callable

import pytest


@pytest.fixture(autouse=True)
def _one_thread_and_fixed_peak(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    import torch

    torch.set_num_threads(1)
    monkeypatch.setenv("SCALING_PEAK_FLOPS", "1e11")  # MFU without the matmul probe
    monkeypatch.setenv("SCALING_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cache"))


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


TINY: dict[str, Any] = {
    "model": {"n_layer": 1, "d_model": 32, "n_head": 2, "context": 32},
    "tokens": 32 * 8 * 24,  # 24 steps of 8 sequences
    "batch_tokens": 32 * 8,
    "eval_tokens": 32 * 16,
    "optimizer": {"lr": 3e-3},
    "execution": {"eval_interval": 8, "checkpoint_interval": 4, "threads": 1},
    "evals": {"next_line": False},  # tasks are test_evals.py's subject, not every run's
}


@pytest.fixture
def tiny() -> dict[str, Any]:
    """The tiny spec's fields (a fresh copy)."""
    import copy

    return copy.deepcopy(TINY)


@pytest.fixture
def make_spec() -> Callable[..., Any]:
    """``make_spec(**overrides)``: a tiny RunSpec; nested dicts merge into the defaults."""
    from scaling.trainer.spec import RunSpec

    def make(**over: Any) -> Any:
        return RunSpec.from_dict(_merge(TINY, over))

    return make


@pytest.fixture
def make_request() -> Callable[..., Any]:
    """``make_request(**overrides)``: the tiny run as a spec file states it (a RunRequest: precision auto)."""
    from scaling.trainer.spec import RunRequest

    def make(**over: Any) -> Any:
        return RunRequest.from_dict(_merge(TINY, over))

    return make


def _registrar(url: str) -> Callable[..., str]:
    from scaling.db import Store

    def reg(spec: Any, sweep: str = "t") -> str:
        with Store(url) as store:
            store.register(sweep, [spec.record()])
            assert store.claim(spec.key, "test", sweep=sweep) is not None
        return url

    return reg


@pytest.fixture
def registered(sqlite_url: str) -> Callable[..., str]:
    """``registered(spec, sweep="t")``: register and claim ``spec`` in SQLite; returns the URL."""
    return _registrar(sqlite_url)


@pytest.fixture
def registered_any(db_url: str) -> Callable[..., str]:
    """Like ``registered``, once on SQLite and once on PostgreSQL (when the CI provides it)."""
    return _registrar(db_url)
