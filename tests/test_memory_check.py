"""A run that cannot fit is refused from its memory estimate before anything is allocated."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml

from cli_run import run_main
from scaling.accounting import GIB, MAX_DEVICE_GIB, Shape, check_fits
from scaling.memory import estimate_memory
from scaling.errors import ResourceError


def _est(n_layer: int, d_model: int) -> object:
    return estimate_memory(Shape(n_layer=n_layer, d_model=d_model, n_head=8 if d_model % 8 == 0 else 1, vocab_size=256,
                                 context=64), 4, "fp32", "single", 1)


def test_check_fits_names_the_estimate_and_the_limit() -> None:
    small = _est(2, 64)
    check_fits(small, 1 * GIB, what="tiny")  # fits: nothing raised
    with pytest.raises(ResourceError) as exc:
        check_fits(_est(40, 8192), 16 * GIB, what="model 40x8192", limit_name="this machine's RAM")
    line = exc.value.one_line()
    assert "model 40x8192 needs an estimated" in line and "GiB per worker" in line
    assert "this machine's RAM (16 GiB)" in line
    with pytest.raises(ResourceError, match="more than any device"):
        check_fits(_est(1000, 100000), None, what="x")
    inf = estimate_memory(Shape(1, 64, 1, 256, 64), 4, "fp32", "single", 1)
    object.__setattr__(inf, "activations_bytes", math.inf)
    with pytest.raises(ResourceError):
        check_fits(inf, MAX_DEVICE_GIB * GIB, what="overflowed")


@pytest.mark.parametrize("shape", [(1000, 100000), (40, 8192)])
def test_scaling_train_refuses_before_building(shape: tuple[int, int], tmp_path: Path) -> None:
    n_layer, d_model = shape
    spec = {"model": {"n_layer": n_layer, "d_model": d_model, "n_head": 100 if d_model == 100000 else 64, "context": 64},
            "tokens": 100_000, "batch_tokens": 256, "execution": {"device": "cpu"}}
    path = tmp_path / "big.yaml"
    path.write_text(yaml.safe_dump(spec))
    db = tmp_path / "r.db"
    got = run_main("train", str(path), "--db", f"sqlite:///{db}", "--run-dir", str(tmp_path / "run"))
    assert got.code == 2, got
    assert got.err.strip().count("\n") == 0 and f"model {n_layer}x{d_model} needs an estimated" in got.err
    assert "this machine's RAM" in got.err
    assert not db.exists() and not (tmp_path / "run").exists()


def test_the_spec_device_memory_is_the_limit_when_given(tmp_path: Path) -> None:
    spec = {"model": {"n_layer": 2, "d_model": 256, "n_head": 4, "context": 64}, "tokens": 100_000,
            "batch_tokens": 256, "execution": {"device": "cpu", "device_memory_gib": 0.001}}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(spec))
    got = run_main("train", str(path), "--db", f"sqlite:///{tmp_path / 'r.db'}")
    assert got.code == 2 and "execution.device_memory_gib (0.001 GiB)" in got.err, got.err


def test_a_plan_without_device_memory_is_held_to_any_device(tmp_path: Path) -> None:
    plan = {"name": "huge", "model": {"context": 64},
            "train": {"batch_tokens": 256},
            "grid": [{"compute": [1e25], "models": [{"n_layer": 1000, "d_model": 100000, "n_head": 100}]}]}
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(plan, sort_keys=False))
    got = run_main("plan", str(path))
    assert got.code == 2, got
    assert "more than any device" in got.err and f"{MAX_DEVICE_GIB:.3g} GiB" in got.err
    assert f"{path}:" in got.err
