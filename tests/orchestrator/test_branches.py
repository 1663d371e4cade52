"""Cooldown branches: plan expansion (keys, parents, branch points), the trainer starting a branch
from its trunk's checkpoint, the scheduler's dependency rule, and a real branch sweep on Ray
with workers SIGKILLed in the trunk and in a cooldown."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pytest

from orch_helpers import assert_consistent, shape, write_plan
from scaling import vocab as names
from scaling.errors import PlanError
from scaling.orchestrator import dependencies
from scaling.orchestrator.expand import expand
from scaling.orchestrator.plan import load_plan
from scaling.trainer.checkpoints import lineage
from scaling.trainer.optim import decay_start, lr_at
from scaling.trainer.sections import ScheduleSpec

pytestmark = pytest.mark.usefixtures("shared_ray")  # in-process sweeps join the session's Ray

BATCH = 512  # write_plan's batch_tokens


def _plan(tmp_path: Path, branches: dict, models=None, name: str = "br", **extra):
    grid = [{"models": models or [shape(1, 16), shape(2, 16)], "branches": branches, **extra.pop("block", {})}]
    path = write_plan(tmp_path / "p.yaml", name, tmp_path / "runs", grid, **extra)
    return load_plan(path)


def _by_role(exp):
    trunks = [r.spec for r in exp.runs if r.spec.execution.keep_steps]
    branches = [r.spec for r in exp.runs if r.spec.branch is not None]
    return trunks, branches


# -- expansion ----------------------------------------------------------------------------------
def test_expansion_makes_one_trunk_per_model_and_a_branch_per_budget(tmp_path: Path) -> None:
    tokens = [BATCH * 10, BATCH * 20, BATCH * 40]
    plan, source = _plan(tmp_path, {"tokens": tokens, "cooldown_fraction": 0.25})
    exp = expand(plan, source)
    trunks, branches = _by_role(exp)
    assert len(exp.runs) == 2 * 4 and len(trunks) == 2 and len(branches) == 6
    for trunk in trunks:
        mine = sorted((b for b in branches if b.branch.parent == trunk.key), key=lambda b: b.tokens)
        assert [b.tokens for b in mine] == tokens
        points = [b.branch.from_step for b in mine]
        # Each branch leaves the trunk where its last quarter of steps (its cooldown) begins.
        assert points == [10 - round(2.5), 20 - 5, 40 - 10] == [decay_start(b.steps, b.schedule) for b in mine]
        assert trunk.execution.keep_steps == tuple(points)
        assert trunk.tokens == max(points) * BATCH and trunk.schedule.kind == "constant"
        assert trunk.branch is None and trunk.shape == mine[0].shape
        for b in mine:
            assert b.schedule.kind == "wsd" and b.schedule.decay_fraction == 0.25
            assert b.batch_tokens == trunk.batch_tokens and b.optimizer.lr == trunk.optimizer.lr
            rec = b.record()
            assert rec["parent_key"] == trunk.key and rec["trunk_tokens"] == b.branch.from_step * BATCH
            assert rec["D"] == b.tokens
        assert trunk.record()["parent_key"] is None and trunk.record()["trunk_tokens"] == 0
    assert len({r.key for r in exp.runs}) == len(exp.runs)
    # Keys are stable, and a branch's key hashes its parent and branch point.
    assert [r.key for r in expand(plan, source).runs] == [r.key for r in exp.runs]
    b = branches[0]
    other_parent = b.model_copy(update={"branch": b.branch.model_copy(update={"parent": "0" * 16})})
    assert other_parent.key != b.key
    assert "branch" not in trunks[0].key_fields() and "decay_shape" not in trunks[0].key_fields()["schedule"]


def test_cooldown_shape_and_fraction_change_branches_but_not_the_trunk(tmp_path: Path) -> None:
    tokens = [BATCH * 10, BATCH * 20]
    linear = expand(*_plan(tmp_path, {"tokens": tokens}))
    sqrt = expand(*_plan(tmp_path, {"tokens": tokens, "shape": "1-sqrt"}))
    (t1, *_), b1 = _by_role(linear)
    (t2, *_), b2 = _by_role(sqrt)
    assert t1.key == t2.key  # the same trunk serves both cooldown shapes
    assert {b.key for b in b1}.isdisjoint({b.key for b in b2})
    assert {b.schedule.decay_shape for b in b2} == {"1-sqrt"}
    # A longer largest branch means a longer trunk: a different trunk, hence different branch keys.
    longer = expand(*_plan(tmp_path, {"tokens": tokens + [BATCH * 40]}))
    (t3, *_), b3 = _by_role(longer)
    assert t3.key != t1.key and {b.key for b in b3}.isdisjoint({b.key for b in b1})


def test_one_minus_sqrt_cooldown_falls_faster_at_first_and_ends_at_the_floor() -> None:
    lin = ScheduleSpec(kind="wsd", warmup_fraction=0.0, decay_fraction=0.5, min_lr_ratio=0.0)
    sq = lin.model_copy(update={"decay_shape": "1-sqrt"})
    assert [lr_at(t, 10, 1.0, sq) for t in range(5)] == [1.0] * 5
    for t in range(5, 9):
        progress = (t - 5 + 1) / 5
        assert lr_at(t, 10, 1.0, lin) == pytest.approx(1 - progress)
        assert lr_at(t, 10, 1.0, sq) == pytest.approx(1 - math.sqrt(progress))
        assert lr_at(t, 10, 1.0, sq) < lr_at(t, 10, 1.0, lin)
    assert lr_at(9, 10, 1.0, sq) == pytest.approx(0.0)


@pytest.mark.parametrize(
    ("branches", "block", "match"),
    [
        ({"tokens": [BATCH * 2, BATCH * 400]}, {}, "inside its warmup"),
        ({"tokens": [BATCH // 2]}, {}, "less than one batch"),
        ({"tokens": [BATCH * 8], "cooldown_fraction": 1.0}, {}, "cooldown_fraction"),
        ({"tokens": [BATCH * 400], "cooldown_fraction": 0.99}, {}, r"cooldown_fraction: 0\.99 .* at most 0\.95"),
        ({"tokens": [BATCH * 8], "shape": "cosine"}, {}, "shape"),
        ({"tokens": [BATCH * 8]}, {"tokens": [BATCH * 8]}, "exactly one of"),
    ],
)
def test_bad_branch_plans_are_one_line_naming_the_field(tmp_path: Path, branches: dict, block: dict, match: str) -> None:
    with pytest.raises(PlanError, match=match) as err:
        expand(*_plan(tmp_path, branches, block=block))
    assert "p.yaml" in str(err.value) and "\n" not in str(err.value)


def test_fixed_warmup_steps_let_a_short_branch_leave_a_long_trunk(tmp_path: Path) -> None:
    # With warmup_fraction the trunk warms up over 5% of its own 320 steps, past a 2-step branch's
    # branch point; with warmup_steps every run and trunk warms up alike, so the branch is valid.
    train = {"precision": "fp32", "batch_tokens": BATCH, "eval_interval": 1000, "eval_tokens": 2048,
             "checkpoint_interval": 4, "optimizer": {"lr": 3e-3}, "schedule": {"warmup_steps": 1}}
    plan, source = _plan(tmp_path, {"tokens": [BATCH * 2, BATCH * 400]}, train=train)
    trunks, branches = _by_role(expand(plan, source))
    assert all(s.schedule.warmup_steps == 1 for s in trunks + branches)
    assert sorted(b.branch.from_step for b in branches)[0] == 1


# -- the dependency rule --------------------------------------------------------------------------
def test_a_branch_waits_for_its_trunk_checkpoint_and_then_needs_the_trunk_no_more(tmp_path: Path) -> None:
    exp = expand(*_plan(tmp_path, {"tokens": [BATCH * 8, BATCH * 16]}, models=[shape(1, 16)]))
    (trunk,), (small, _) = _by_role(exp)
    sweep_dir = tmp_path / "runs" / "br"
    run_dir = sweep_dir / small.key
    verdict = lambda state: dependencies.verdict(small, run_dir, state).kind  # noqa: E731
    assert trunk.execution.keep_steps == (6, 13)
    assert dependencies.verdict(trunk, sweep_dir / trunk.key, None).kind == dependencies.READY
    assert verdict(names.RUNNING) == verdict("queued") == dependencies.WAIT
    assert verdict(names.COMPLETED) == dependencies.RETRAIN_TRUNK
    assert verdict(names.FAILED) == verdict(None) == dependencies.FAIL
    ckpt = lineage.parent_checkpoint(run_dir, small.branch)
    assert ckpt == sweep_dir / trunk.key / "checkpoints" / "step_00000006"
    ckpt.mkdir(parents=True)
    assert verdict(names.RUNNING) == dependencies.WAIT  # renamed into place only with its manifest
    (ckpt / lineage.MANIFEST_FILE).write_text("{}")
    assert verdict(names.RUNNING) == verdict(names.FAILED) == dependencies.READY
    shutil.rmtree(ckpt)
    own = lineage.step_folder(run_dir, 6)
    own.mkdir(parents=True)
    (own / lineage.MANIFEST_FILE).write_text("{}")
    assert verdict(names.FAILED) == dependencies.READY  # resumes from its own checkpoint


# -- the trainer ----------------------------------------------------------------------------------
def _train_metrics(url: str, key: str, sweep: str):
    from scaling.db import connect

    m = connect(url).metrics(run_keys=[key], names=[names.TRAIN_LOSS], sweep=sweep)
    return dict(zip(m["step"].tolist(), m["value"].tolist()))


def test_branch_starts_from_the_trunk_checkpoint_which_rotation_keeps(tmp_path: Path, sqlite_url: str) -> None:
    from scaling.db import Store
    from scaling.errors import TrainingError
    from scaling.trainer.checkpoints import checkpoint
    from scaling.trainer import train

    exp = expand(*_plan(tmp_path, {"tokens": [BATCH * 8, BATCH * 16]}, models=[shape(1, 16)],
                        train={"precision": "fp32", "batch_tokens": BATCH, "eval_interval": 1000, "eval_tokens": 2048,
                               "checkpoint_interval": 2, "keep_checkpoints": 1, "optimizer": {"lr": 3e-3}}))
    (trunk,), (small, large) = _by_role(exp)
    sweep_dir = tmp_path / "runs" / "br"
    with Store(sqlite_url) as store:
        store.register("br", [r.spec.record() for r in exp.runs])
    # Before the trunk has its checkpoint, a branch refuses to start (one line, no training).
    with pytest.raises(TrainingError, match="no usable checkpoint at step 6"):
        train(small, sqlite_url, sweep_dir / small.key, sweep="br")
    train(trunk, sqlite_url, sweep_dir / trunk.key, sweep="br")
    kept = [lineage.step_of(p) for p in checkpoint.checkpoints(sweep_dir / trunk.key)]
    assert kept == [6, 13]  # keep_checkpoints=1 rotated every other step away, not the branch points
    shutil.rmtree(sweep_dir / small.key, ignore_errors=True)
    result = train(small, sqlite_url, sweep_dir / small.key, sweep="br")
    assert result.status == "completed" and result.steps == 8
    trunk_loss, branch_loss = _train_metrics(sqlite_url, trunk.key, "br"), _train_metrics(sqlite_url, small.key, "br")
    assert min(branch_loss) == 7 and max(branch_loss) == 8  # its first step is the one after the branch point
    # Same weights, optimizer state and batch at the branch point: the curve continues the trunk's.
    assert branch_loss[7] == pytest.approx(trunk_loss[7], rel=1e-6)
    from scaling.db import connect

    ev = connect(sqlite_url).events(sweep="br", run_keys=[small.key])
    start = ev[ev["kind"] == names.BRANCH_START]
    assert len(start) == 1 and int(start["step"].iloc[0]) == 6


# -- a real sweep on Ray --------------------------------------------------------------------------
def _run_sweep(plan: Path, url: str):
    from scaling.orchestrator.sweep import run_sweep

    return run_sweep(plan, db=url, fit=False, report=False, echo=lambda s: None)


@pytest.mark.ray
@pytest.mark.slow
def test_branch_sweep_on_ray_survives_kills_in_trunk_and_cooldown(tmp_path: Path, sqlite_url: str) -> None:
    from scaling.db import Store, connect
    from scaling.orchestrator.status import sweep_status

    tokens = [BATCH * 8, BATCH * 16, BATCH * 24]
    # Step 7 is inside the trunk (18 steps) and inside the 8-step branch's cooldown (steps 6-7):
    # both workers are SIGKILLed there on their first attempt.
    plan_path = write_plan(
        tmp_path / "p.yaml", "brk", tmp_path / "runs",
        [{"models": [shape(1, 16), shape(2, 16)], "branches": {"tokens": tokens, "cooldown_fraction": 0.25},
          "faults": {"kill_at_step": 7}}],
        resources={"num_cpus": 2},
    )
    exp = expand(*load_plan(plan_path))
    trunks, branches = _by_role(exp)
    assert [b.branch.from_step for b in branches if b.tokens == tokens[0]] == [6, 6]
    out = _run_sweep(plan_path, sqlite_url).outcome
    assert out.ok and len(out.completed) == 8
    runs = assert_consistent(sqlite_url, "brk").set_index("run_key")
    res = connect(sqlite_url)
    events = res.events(sweep="brk")
    for spec in trunks + branches:
        row = runs.loc[spec.key]
        parent = row["parent_key"] if isinstance(row["parent_key"], str) else None  # pandas reads NULL as NaN
        assert parent == (spec.branch.parent if spec.branch else None)
        assert row["trunk_tokens"] == spec.trunk_tokens
    for b in branches:
        trunk_loss, branch_loss = _train_metrics(sqlite_url, b.branch.parent, "brk"), _train_metrics(sqlite_url, b.key, "brk")
        first = b.branch.from_step + 1
        assert min(branch_loss) == first and max(branch_loss) == b.steps
        if first in trunk_loss:  # same weights, optimizer state and batch as the trunk's step
            assert branch_loss[first] == pytest.approx(trunk_loss[first], rel=1e-6), "the branch does not continue its trunk"
        else:  # the latest branch leaves where the trunk ends: its first loss follows the trunk's last
            assert branch_loss[first] == pytest.approx(trunk_loss[first - 1], rel=0.05)
    killed = [b.key for b in branches if b.tokens == tokens[0]] + [t.key for t in trunks]
    for key in killed:
        kinds = events[events["run_key"] == key]["kind"].tolist()
        assert names.INTERRUPTED in kinds and names.RESUME in kinds, (key, kinds)
        assert runs.loc[key, "attempts"] == 2
    others = [b.key for b in branches if b.tokens != tokens[0]]
    assert all(runs.loc[k, "attempts"] == 1 for k in others)
    resumed = events[(events["kind"] == names.RESUME) & events["run_key"].isin(killed)]
    assert set(resumed["step"].astype(int)) == {6}  # trunks from their step-6 checkpoint, branches from their own

    # Compute is counted once: each branch adds only its cooldown to its trunk.
    st = sweep_status(sqlite_url, "brk")
    fpt = {s.key: s.flops / s.tokens for s in trunks + branches}
    with_reuse = sum(t.flops for t in trunks) + sum(fpt[b.key] * (b.tokens - b.trunk_tokens) for b in branches)
    without = sum(b.flops for b in branches)
    assert st["flops_total"] == pytest.approx(with_reuse) and st["flops_spent"] == pytest.approx(with_reuse)
    assert st["flops_total_without_reuse"] == pytest.approx(without)
    assert st["branches"] == 6 and st["trunks"] == 2

    # A branch whose trunk checkpoint and own folder are gone: the completed trunk trains past
    # its branch point again, and the branch starts from the new checkpoint.
    victim = next(b for b in branches if b.tokens == tokens[1])
    shutil.rmtree(lineage.parent_checkpoint(tmp_path / "runs" / "brk" / victim.key, victim.branch))
    shutil.rmtree(tmp_path / "runs" / "brk" / victim.key)
    with Store(sqlite_url) as store:
        store.finish(victim.key, names.INTERRUPTED, error="test: its files were lost", sweep="brk")
    before = _train_metrics(sqlite_url, victim.key, "brk")
    out = _run_sweep(plan_path, sqlite_url).outcome
    assert out.ok and set(out.completed) == {victim.key, victim.branch.parent}
    assert len(out.skipped) == 6
    retrain = res.events(sweep="brk", kinds=[names.TRUNK_RETRAIN])
    assert retrain["run_key"].tolist() == [victim.branch.parent]
    assert _train_metrics(sqlite_url, victim.key, "brk") == pytest.approx(before, rel=1e-6)
    assert_consistent(sqlite_url, "brk")


def test_status_counts_a_shared_trunk_once_and_shows_the_cost_without_reuse(tmp_path: Path, sqlite_url: str) -> None:
    import io

    from rich.console import Console

    from scaling.db import Store
    from scaling.orchestrator.status import render_status, sweep_status

    exp = expand(*_plan(tmp_path, {"tokens": [BATCH * 8, BATCH * 16]}, models=[shape(1, 16)]), resolve=False)
    (trunk,), (small, large) = _by_role(exp)
    with Store(sqlite_url) as store:
        store.register("br", [r.spec.record() for r in exp.runs])
        for spec in (trunk, small):
            store.claim(spec.key, "test", sweep="br")
            store.finish(spec.key, names.COMPLETED, final_eval_loss=3.0, sweep="br")
        # The large branch is running: it logged steps 14 and 15 after leaving the trunk at 13.
        store.claim(large.key, "test", sweep="br")
        fpt = large.flops / large.tokens
        store.log_metrics(large.key, [(s, s * BATCH, s * BATCH * fpt, names.TRAIN_LOSS, 3.0) for s in (14, 15)],
                          sweep="br")
    st = sweep_status(sqlite_url, "br")
    own = lambda s: s.flops * (s.tokens - s.trunk_tokens) / s.tokens  # noqa: E731
    assert st["flops_total"] == pytest.approx(trunk.flops + own(small) + own(large))
    assert st["flops_spent"] == pytest.approx(trunk.flops + own(small) + 2 * BATCH * fpt)
    assert st["flops_total_without_reuse"] == pytest.approx(small.flops + large.flops)
    assert st["flops_spent_without_reuse"] == pytest.approx(small.flops)
    assert (st["branches"], st["trunks"]) == (2, 1)
    buf = io.StringIO()
    Console(file=buf, width=300, color_system=None).print(render_status(st))
    text = buf.getvalue()
    assert "2 cooldown branches of 1 trunk(s)" in text
    assert f"{st['flops_total_without_reuse']:.3g}" in text


def test_a_trunk_shared_by_two_blocks_keeps_the_branch_points_of_both(tmp_path: Path) -> None:
    grid = [{"models": [shape(1, 16)], "branches": {"tokens": [BATCH * 8, BATCH * 16]}},
            {"models": [shape(1, 16)], "branches": {"tokens": [BATCH * 12, BATCH * 16], "shape": "1-sqrt"}}]
    exp = expand(*load_plan(write_plan(tmp_path / "p.yaml", "two", tmp_path / "runs", grid)))
    (trunk,), branches = _by_role(exp)
    assert len(branches) == 4 and {b.branch.parent for b in branches} == {trunk.key}
    assert trunk.execution.keep_steps == tuple(sorted({b.branch.from_step for b in branches})) == (6, 10, 13)
