"""The training loop end to end, on the real database (SQLite) and real checkpoints."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from scaling import vocab as names
from scaling.db import connect
from scaling.errors import TrainingError
from scaling.trainer.checkpoints import checkpoint
from scaling.trainer import train
from scaling.trainer.faults import InjectedFault
from scaling.trainer.loop import micro_batches


def _losses(url: str, key: str, name: str = names.TRAIN_LOSS) -> list[tuple[int, float]]:
    df = connect(url).metrics(run_keys=[key], names=[name])
    return list(zip(df["step"].tolist(), df["value"].tolist()))


def _events(url: str, key: str) -> list[str]:
    return connect(url).events(run_keys=[key])["kind"].tolist()


@pytest.mark.slow
def test_loss_falls_well_below_uniform(make_spec, registered, tmp_path: Path) -> None:
    spec = make_spec(
        model={"n_layer": 2, "d_model": 64, "n_head": 4, "context": 64},
        tokens=64 * 16 * 250,
        batch_tokens=64 * 16,
        eval_tokens=64 * 64,
        execution={"eval_interval": 50, "checkpoint_interval": 250},
    )
    url = registered(spec)
    result = train(spec, url, tmp_path)
    assert result.status == "completed" and result.steps == 250
    assert result.final_eval_loss < 0.5 * math.log(256)  # uniform over bytes is ln 256 = 5.55
    evals = [v for _, v in _losses(url, spec.key, names.EVAL_LOSS)]
    assert len(evals) == 5 and evals[-1] < evals[0]
    metrics = set(connect(url).metrics(run_keys=[spec.key])["name"])
    assert {names.TRAIN_LOSS, names.LEARNING_RATE, names.GRAD_NORM, names.TOKENS_PER_SECOND, names.MFU, names.EPOCH} <= metrics
    assert names.DATA in _events(url, spec.key)


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_resume_reproduces_the_trajectory_bit_for_bit(make_spec, registered, tmp_path: Path, precision: str) -> None:
    plain = make_spec(precision=precision)
    crashing = make_spec(precision=precision, faults={"raise_at_step": 14, "raise_attempts": 1})
    url = registered(plain)
    registered(crashing)
    ref = train(plain, url, tmp_path / "plain")
    with pytest.raises(InjectedFault):
        train(crashing, url, tmp_path / "crash", attempt=1)
    assert checkpoint.latest(tmp_path / "crash").name == "step_00000012"
    resumed = train(crashing, url, tmp_path / "crash", attempt=2)
    assert resumed.resumed_from == 12
    assert _losses(url, crashing.key) == _losses(url, plain.key)  # exact floats, every step
    assert resumed.final_eval_loss == ref.final_eval_loss
    assert names.RESUME in _events(url, crashing.key)


def test_sigkill_then_resume_completes(make_spec, registered, tmp_path: Path) -> None:
    spec = make_spec(faults={"kill_at_step": 10, "kill_attempts": 1})
    url = registered(spec)
    code = (
        "import sys, torch; torch.set_num_threads(1)\n"
        "from scaling.trainer import train\nfrom scaling.trainer.spec import RunSpec\n"
        "train(RunSpec.model_validate_json(sys.argv[1]), sys.argv[2], sys.argv[3], attempt=1)\n"
    )
    env = {**os.environ, "SCALING_PEAK_FLOPS": "1e11"}
    proc = subprocess.run([sys.executable, "-c", code, spec.to_json(), url, str(tmp_path)], env=env, timeout=300)
    assert proc.returncode == -signal.SIGKILL
    result = train(spec, url, tmp_path, attempt=2)
    assert result.resumed_from == 8 and result.status == "completed" and result.steps == spec.steps


def test_each_injected_spike_rolls_back_once_and_the_run_completes(make_spec, registered_any, tmp_path: Path) -> None:
    spec = make_spec(faults={"poison_steps": [13, 18]}, spike={"window": 20, "lr_scale_on_rollback": 0.5})
    url = registered_any(spec)
    result = train(spec, url, tmp_path)
    assert result.status == "completed" and result.steps == spec.steps and result.rollbacks == 2
    events = connect(url).events(run_keys=[spec.key])
    kinds = events["kind"].tolist()
    assert kinds.count(names.LOSS_SPIKE) == 2 and kinds.count(names.ROLLBACK) == 2
    rollbacks = [d for k, d in zip(kinds, events["detail"]) if k == names.ROLLBACK]
    assert [r["from_step"] for r in rollbacks] == [13, 16]  # the second poisoned batch comes later
    assert [r["to_step"] for r in rollbacks] == [12, 16]
    assert rollbacks[0]["skipped_cursors"] == [12, 13] and rollbacks[1]["lr_scale"] == 0.25
    assert all(v < 10 for _, v in _losses(url, spec.key))  # no poisoned loss was ever accepted


def test_a_spike_before_the_first_checkpoint_draws_the_seeds_weights_again(make_spec, registered_any,
                                                                           tmp_path: Path) -> None:
    """No step-0 checkpoint is written unless ``keep_steps`` asks: a spike before the first
    checkpoint goes back to the seed's weights, a fresh optimizer and step 0, and skips the batches
    up to the spiking one, as a rollback to a step-0 checkpoint did."""
    from scaling.trainer.loop import SEED_STATE

    spec = make_spec(faults={"poison_steps": [3]}, spike={"window": 2}, execution={"checkpoint_interval": 8})
    url = registered_any(spec)
    seen: list[list[str]] = []
    result = train(spec, url, tmp_path, report=lambda *_: seen.append([p.name for p in checkpoint.checkpoints(tmp_path)]))
    assert result.status == "completed" and result.rollbacks == 1
    assert seen[0] == ["step_00000008"]  # nothing was saved before step 8
    events = connect(url).events(run_keys=[spec.key])
    (rollback,) = [d for k, d in zip(events["kind"], events["detail"]) if k == names.ROLLBACK]
    assert rollback["checkpoint"] == SEED_STATE and rollback["to_step"] == 0 and rollback["skipped_cursors"] == [0, 3]
    asked = make_spec(execution={"keep_steps": [0], "checkpoint_interval": 8}, tokens=32 * 8 * 2)
    train(asked, None, tmp_path / "asked")
    assert [p.name for p in checkpoint.checkpoints(tmp_path / "asked")] == ["step_00000000", "step_00000002"]


def test_a_run_that_keeps_spiking_fails_with_a_reason(make_spec, registered, tmp_path: Path) -> None:
    spec = make_spec(faults={"poison_steps": [13, 18]}, spike={"max_rollbacks": 1})
    url = registered(spec)
    with pytest.raises(TrainingError, match="kept spiking"):
        train(spec, url, tmp_path)


def test_a_run_that_ends_worse_than_a_uniform_guess_fails_as_diverged(make_spec, registered, tmp_path: Path) -> None:
    """lr 30 in fp32 skips most steps for non-finite gradients and ends at tens of thousands of
    nats: recorded as failed with the reason, so no fit ever sees it."""
    spec = make_spec(optimizer={"lr": 30.0}, precision="fp32")
    url = registered(spec)
    with pytest.raises(TrainingError, match=r"diverged: its final eval loss .* is above ln\(256\)"):
        train(spec, url, tmp_path)


def test_fp16_overflow_skips_the_step_and_halves_the_scale(make_spec, registered_any, tmp_path: Path) -> None:
    spec = make_spec(precision="fp16", tokens=32 * 8 * 8, faults={"overflow_steps": [5]})
    url = registered_any(spec)
    result = train(spec, url, tmp_path)
    assert result.overflow_skips == 1 and result.status == "completed"
    events = connect(url).events(run_keys=[spec.key])
    (detail,) = [d for k, d in zip(events["kind"], events["detail"]) if k == names.OVERFLOW_SKIP]
    assert detail["scale_after"] == detail["scale_before"] / 2
    scales = dict(_losses(url, spec.key, names.LOSS_SCALE))
    assert scales[6] == scales[5] / 2


def test_micro_batches_pair_up_across_ranks() -> None:
    for batch, world, micro in ((8, 1, None), (8, 1, 3), (255, 8, 4), (10, 4, 1), (10, 3, 2)):
        plans = []
        for rank in range(world):
            first = rank * batch // world
            share = (rank + 1) * batch // world - first
            parts = micro_batches(batch, world, share, micro)
            assert sum(c for _, c in parts) == share and [o for o, _ in parts] == [sum(c for _, c in parts[:i]) for i in range(len(parts))]
            assert max(c for _, c in parts) <= (micro or share) and max(c for _, c in parts) - min(c for _, c in parts) <= 1
            plans.append(len(parts))
        assert len(set(plans)) == 1  # every rank runs as many forward passes
    assert micro_batches(10, 4, 2, 1) == [(0, 1), (1, 1), (2, 0)]  # the empty part runs with weight 0


@pytest.mark.parametrize("micro", [2, 3])
def test_gradient_accumulation_matches_the_whole_batch(make_spec, tmp_path: Path, micro: int) -> None:
    whole = train(make_spec(precision="fp32", tokens=32 * 8 * 6), None, tmp_path / "a")
    split = train(make_spec(precision="fp32", tokens=32 * 8 * 6, execution={"micro_batch_size": micro}), None, tmp_path / "b")
    assert split.final_train_loss == pytest.approx(whole.final_train_loss, rel=1e-5)
    assert split.final_eval_loss == pytest.approx(whole.final_eval_loss, rel=1e-5)


def test_checkpoints_are_atomic_pruned_and_safe_to_load(make_spec, tmp_path: Path) -> None:
    reports: list[tuple[int, dict, str | None]] = []
    spec = make_spec(execution={"keep_checkpoints": 2})
    train(spec, None, tmp_path, report=lambda step, m, ckpt: reports.append((step, m, ckpt)))
    kept = checkpoint.checkpoints(tmp_path)
    assert [p.name for p in kept] == ["step_00000020", "step_00000024"]
    assert not [p for p in (tmp_path / "checkpoints").iterdir() if p.name.startswith(".")]
    state = torch.load(kept[-1] / checkpoint.STATE_FILE, weights_only=True)
    assert state["meta"]["step"] == 24 and state["meta"]["cursor"] == 24
    (own,) = state["meta"]["rng"]["ranks"]  # one generator state per saving rank
    assert isinstance(own["cpu"], torch.Tensor) and "cuda" not in own
    assert [s for s, _, c in reports if c] == [4, 8, 12, 16, 20, 24]
    assert [s for s, m, _ in reports if "eval_loss" in m] == [8, 16, 24]
    # A finished run trained again resumes at its end and changes nothing.
    again = train(spec, None, tmp_path)
    assert again.resumed_from == 24 and again.steps == 24


def test_the_data_event_records_the_attention_kernel(make_spec, registered, tmp_path: Path) -> None:
    spec = make_spec(tokens=32 * 8 * 4)
    url = registered(spec)
    train(spec, url, tmp_path)
    ev = connect(url).events(run_keys=[spec.key])
    (data,) = [d for k, d in zip(ev["kind"], ev["detail"]) if k == names.DATA]
    assert data["attention"] == "sdpa"  # flash-attn runs on GPUs only


def test_one_cpu_process_steps_with_the_fused_adamw(make_spec, tmp_path: Path) -> None:
    """One process takes AdamW's fused kernel, on the CPU too (one kernel for every tensor); a run
    resumed from a checkpoint of a replicated run keeps it (tests/distributed/test_checkpoint_reshard.py,
    world size 2 to 1: the kernel is this process's choice, not a setting the checkpoint carries)."""
    from scaling.trainer.loop import Trainer

    trainer = Trainer(make_spec(precision="fp32"), None, tmp_path)
    assert trainer.optimizer.defaults["fused"] and all(g["fused"] for g in trainer.optimizer.param_groups)
    result = trainer.fit()
    assert result.status == names.COMPLETED and math.isfinite(result.final_eval_loss)


def test_adam_steps_are_restored_where_this_process_kernel_reads_them() -> None:
    """``place_steps`` puts each ``step`` on the parameter's device for a fused or capturable group
    and on the CPU otherwise, whatever the writer's kernel was. The meta device stands in for a GPU
    (the CPU cannot hold two devices): a fused group's CPU ``step`` moves to it; a per-tensor
    group's stays on the CPU, where that kernel reads it without a device sync."""
    import torch

    from scaling.trainer.checkpoints.checkpoint import place_steps

    on_gpu, on_cpu = torch.nn.Parameter(torch.empty(3, device="meta")), torch.nn.Parameter(torch.zeros(3))
    opt = torch.optim.AdamW([{"params": [on_gpu]}, {"params": [on_cpu]}])
    opt.param_groups[0]["fused"] = True  # the kernel this process chose for that group
    for p in (on_gpu, on_cpu):
        opt.state[p] = {"step": torch.tensor(7.0, dtype=torch.float64)}
    place_steps(opt)
    assert opt.state[on_gpu]["step"].device.type == "meta" and opt.state[on_gpu]["step"].dtype == torch.float32
    assert opt.state[on_cpu]["step"].device.type == "cpu" and float(opt.state[on_cpu]["step"]) == 7.0


def test_a_resuming_run_loads_its_weights_without_drawing_them_first(make_spec, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A run with a checkpoint to resume from allocates its weights without replaying the seed's
    draws (minutes per rank for a large model): the checkpoint's weights arrive with no draw at all.
    When no checkpoint loads after all (the only one is corrupt), the seed's weights are drawn
    then, equal to one fresh process's."""
    from scaling.trainer import loop
    from scaling.trainer.families.model import build_model

    spec = make_spec(tokens=32 * 8 * 4, precision="fp32")
    finished = loop.Trainer(spec, None, tmp_path / "run")
    finished.fit()
    draws: list[str] = []
    monkeypatch.setattr(loop, "init_materialized", lambda *a: draws.append("init_materialized"))
    monkeypatch.setattr(loop, "build_model", lambda *a: draws.append("build_model"))
    resumed = loop.Trainer(spec, None, tmp_path / "run")
    resumed.start()
    assert draws == [] and resumed.resumed_from == 4
    for (name, a), b in zip(finished.par.model.named_parameters(), resumed.par.model.parameters()):
        assert torch.equal(a, b), name

    monkeypatch.undo()
    (latest,) = checkpoint.checkpoints(tmp_path / "run")[-1:]
    for older in checkpoint.checkpoints(tmp_path / "run")[:-1]:
        import shutil

        shutil.rmtree(older)
    shard = next(latest.glob("*.distcp"))
    shard.write_bytes(shard.read_bytes()[:-1])  # the only checkpoint no longer verifies
    fresh = loop.Trainer(spec, None, tmp_path / "run")
    assert fresh.par.init_weights is not None  # a checkpoint was there: nothing drawn at build
    fresh.start()
    assert fresh.resumed_from is None and fresh.par.init_weights is None
    expected = build_model(spec.shape, spec.seed)
    for (name, a), b in zip(expected.named_parameters(), fresh.par.model.parameters()):
        assert torch.equal(a, b), name
