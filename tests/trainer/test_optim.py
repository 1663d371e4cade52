"""The LR schedules and AdamW's parameter groups."""

from __future__ import annotations

import math

import pytest
import torch

from scaling.accounting import Shape
from scaling.trainer.families.model import build_model
from scaling.trainer.optim import lr_at, param_groups, warmup_steps
from scaling.trainer.sections import ScheduleSpec


def test_cosine_warms_up_then_decays_to_ten_percent() -> None:
    s = ScheduleSpec(kind="cosine", warmup_fraction=0.1, min_lr_ratio=0.1)
    lrs = [lr_at(t, 100, 1.0, s) for t in range(100)]
    assert warmup_steps(100, s) == 10
    assert lrs[0] == pytest.approx(0.1) and lrs[9] == pytest.approx(1.0)
    assert lrs[10] == pytest.approx(1.0)
    assert lrs[-1] == pytest.approx(0.1)  # the floor at the last step
    assert all(a >= b for a, b in zip(lrs[10:], lrs[11:]))  # monotone after warmup
    mid = 10 + (99 - 10) / 2
    assert lr_at(int(mid), 100, 1.0, s) == pytest.approx(0.55, abs=0.02)


def test_wsd_is_flat_then_decays_linearly() -> None:
    s = ScheduleSpec(kind="wsd", warmup_fraction=0.0, decay_fraction=0.2, min_lr_ratio=0.0)
    lrs = [lr_at(t, 100, 2.0, s) for t in range(100)]
    assert lrs[:80] == [2.0] * 80
    assert lrs[-1] == pytest.approx(0.0)
    diffs = [a - b for a, b in zip(lrs[80:], lrs[81:])]
    assert all(d == pytest.approx(diffs[0]) for d in diffs)


def test_constant_after_warmup() -> None:
    s = ScheduleSpec(kind="constant", warmup_fraction=0.5)
    assert [lr_at(t, 4, 1.0, s) for t in range(4)] == [0.5, 1.0, 1.0, 1.0]


def test_warmup_steps_fixes_the_warmup_whatever_the_run_length() -> None:
    s = ScheduleSpec(kind="cosine", warmup_fraction=0.5, warmup_steps=4)
    assert [warmup_steps(n, s) for n in (3, 10, 1000)] == [3, 4, 4]  # never past the run's end
    assert [lr_at(t, 1000, 1.0, s) for t in range(5)] == [0.25, 0.5, 0.75, 1.0, 1.0]
    trunk = s.model_copy(update={"kind": "constant"})
    # A constant trunk warms up exactly as a cosine run of any length does: same LR until step 4.
    assert [lr_at(t, 40, 1.0, trunk) for t in range(5)] == [lr_at(t, 400, 1.0, s) for t in range(5)]


def test_warmup_steps_is_keyed_only_when_set(make_spec) -> None:
    spec = make_spec()
    assert "warmup_steps" not in spec.key_fields()["schedule"]  # runs stored before it keep their keys
    fixed = spec.model_copy(update={"schedule": spec.schedule.model_copy(update={"warmup_steps": 10})})
    assert fixed.key_fields()["schedule"]["warmup_steps"] == 10 and fixed.key != spec.key


def test_no_weight_decay_on_norms_biases_and_embeddings() -> None:
    shape = Shape(2, 32, 2, 256, 16)
    model = build_model(shape, 0)
    decay, no_decay = param_groups(model, 0.1)
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    ids = {id(p) for p in decay["params"]}
    names = {n for n, p in model.named_parameters() if id(p) in ids}
    assert names == {f"blocks.{i}.{m}.weight" for i in range(2) for m in ("attn.qkv", "attn.proj", "mlp.fc", "mlp.proj")}
    total = sum(p.numel() for g in (decay, no_decay) for p in g["params"])
    assert total == shape.params_total  # every parameter once (the tied head is the embedding)
    assert not math.isnan(total)


def _trainer(tmp_path, name: str, fused: bool, monkeypatch: pytest.MonkeyPatch):
    from scaling.trainer import loop
    from scaling.trainer.spec import RunSpec

    spec = RunSpec.from_dict({
        "model": {"n_layer": 2, "d_model": 32, "n_head": 2, "vocab_size": 256, "context": 32},
        "tokens": 32 * 8 * 30, "batch_tokens": 32 * 8, "eval_tokens": 32 * 4, "evals": {"next_line": False},
        "optimizer": {"lr": 3e-3}, "precision": "fp32",
        "execution": {"threads": 1, "eval_interval": 1000, "checkpoint_interval": 1000, "log_interval": 1000}})
    monkeypatch.setattr(loop, "fused_optimizer", lambda *_: fused)
    trainer = loop.Trainer(spec, None, tmp_path / name)
    trainer.start()
    return trainer


def test_the_optimizer_kernel_does_not_steer_the_trajectory(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A fused and a per-tensor AdamW differ only in rounding, so after 30 steps their weights agree
    to a few fp32 ulps of the updates. The key bias's gradient is pure rounding noise, which Adam
    normalizes into learning-rate-sized steps: unless it is zeroed, the two runs' key biases walk
    apart (1.5e-4 of the largest weight here after 30 steps, 1.4% of eval loss after 100 steps at
    4 x d 64, and so did a tp2 x pp2 run from one process)."""
    fused, plain = (_trainer(tmp_path, name, name == "fused", monkeypatch) for name in ("fused", "plain"))
    assert fused.optimizer.defaults.get("fused") and not plain.optimizer.defaults.get("fused")
    for _ in range(30):
        fused.step_once()
        plain.step_once()
    a, b = dict(fused.par.model.named_parameters()), dict(plain.par.model.named_parameters())
    for name in a:
        assert float((a[name] - b[name]).detach().abs().max()) <= 1e-5 * float(b[name].detach().abs().max()), name
    for block in fused.par.model.blocks:  # the key part of each key bias never moved from zero
        key = block.attn.qkv.bias.detach().view(-1, 3, block.attn.head_dim)[:, 1]
        assert torch.count_nonzero(key) == 0


@pytest.mark.parametrize("execution", [
    {"workers": 1},
    {"workers": 2, "strategy": "ddp"},
    {"workers": 2, "strategy": "zero1"},
    {"workers": 4, "strategy": "zero3", "pp": 2},
    {"workers": 2, "strategy": "zero3", "tp": 2},
])
def test_cpu_offload_is_refused_in_one_line_where_it_does_nothing(execution: dict) -> None:
    """Only FSDP2 (zero2, zero3 over several data-parallel ranks, no pipeline) has shards to offload."""
    from pydantic import ValidationError

    from scaling.trainer.sections import ExecutionSpec

    with pytest.raises(ValidationError, match="cpu_offload takes effect only under strategy zero2 or zero3"):
        ExecutionSpec(**execution, cpu_offload=True)
    ExecutionSpec(workers=2, strategy="zero3", cpu_offload=True)  # what it is for


def test_offloading_workers_step_on_every_reserved_core(make_spec) -> None:
    from scaling.trainer.loop import worker_threads

    spec = make_spec()
    offload = spec.execution.model_copy(update={"workers": 2, "strategy": "zero3", "cpu_offload": True,
                                                "cpus_per_worker": 6, "threads": 1})
    assert worker_threads(spec.model_copy(update={"execution": offload})) == 6
    assert worker_threads(spec) == spec.execution.threads


def test_adamw_is_fused_on_the_cpu_and_cuda() -> None:
    """Every layout: ZeRO-1 gets the device-side skip through its inner optimizer, fp16 through the
    loop's own flag (the scaler's found-inf, of a shape the fused kernel refuses, is not handed over)."""
    from scaling.trainer.loop import fused_optimizer
    from scaling.trainer.runtime import Runtime

    assert fused_optimizer(Runtime.current("cpu")) is True


@pytest.mark.parametrize("schedule", [
    {"kind": "two_stage", "warmup_steps": 4, "drop_at": 0.5, "drop_lr_ratio": 0.3},
    {"kind": "wsd", "warmup_steps": 4, "decay_fraction": 0.5, "decay_shape": "exponential", "min_lr_ratio": 0.1},
])
def test_a_real_run_steps_by_the_rates_the_curve_laws_rebuild_from_its_spec(make_spec, registered, tmp_path,
                                                                             schedule: dict) -> None:
    """24 real steps: the rate the loop recorded at every step is the one the fits rebuild from the stored spec."""
    import numpy as np

    from scaling import vocab
    from scaling.db import connect
    from scaling.fitting.curves.data import run_curve
    from scaling.lr_schedule import lr_steps
    from scaling.trainer import train

    spec = make_spec(schedule=schedule, execution={"eval_interval": 4})
    url = registered(spec)
    train(spec, url, tmp_path / "run")
    rows = connect(url).metrics(run_keys=[spec.key])
    lr = rows[rows["name"] == vocab.LEARNING_RATE].sort_values("step")
    evals = rows[rows["name"] == vocab.EVAL_LOSS].sort_values("step")
    rebuilt = lr_steps(spec.steps, 3e-3, spec.schedule)
    assert len(lr) == 24 and np.allclose(lr["value"], rebuilt[lr["step"].to_numpy() - 1], rtol=1e-6)
    runs = connect(url).runs()
    stored = runs[runs["run_key"] == spec.key].iloc[0]["spec"]  # the spec as the database holds it
    curve = run_curve(spec.key, stored, evals["step"].to_numpy(), evals["value"].to_numpy(float))
    assert np.array_equal(curve.lr, rebuilt) and curve.steps.size == 6
    assert len(set(np.round(rebuilt[4:], 12))) > 1  # the schedule does change after warmup
