"""The learning-rate schedules: every step's rate at once equal to the trainer's step by step, the
exponential WSD decay and the two-stage drop, their fields checked in one line, and the run keys of
the schedules that existed before them unchanged."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

from scaling.lr_schedule import decay_start, drop_step, lr_at, lr_steps, schedule_of
from scaling.trainer.sections import ScheduleSpec
from scaling.trainer.spec import RunSpec

SCHEDULES = {
    "constant": ScheduleSpec(kind="constant"),
    "cosine": ScheduleSpec(kind="cosine", warmup_fraction=0.1, min_lr_ratio=0.1),
    "cosine to zero": ScheduleSpec(kind="cosine", warmup_steps=7, min_lr_ratio=0.0),
    "wsd linear": ScheduleSpec(kind="wsd", decay_fraction=0.2),
    "wsd 1-sqrt": ScheduleSpec(kind="wsd", warmup_steps=5, decay_fraction=0.5, decay_shape="1-sqrt", min_lr_ratio=0.0),
    "wsd exponential": ScheduleSpec(kind="wsd", decay_fraction=0.3, decay_shape="exponential", min_lr_ratio=0.1),
    "two_stage": ScheduleSpec(kind="two_stage", warmup_steps=9, drop_at=0.5, drop_lr_ratio=0.3),
    "two_stage in warmup": ScheduleSpec(kind="two_stage", warmup_fraction=0.4, drop_at=0.1, drop_lr_ratio=0.5),
}


@pytest.mark.parametrize("name", SCHEDULES)
@pytest.mark.parametrize("total", [1, 2, 3, 10, 97, 1000])
def test_every_steps_rate_at_once_equals_the_trainers_step_by_step(name: str, total: int) -> None:
    schedule = SCHEDULES[name]
    vector = lr_steps(total, 3e-4, schedule)
    scalar = np.array([lr_at(t, total, 3e-4, schedule) for t in range(total)])
    assert vector.shape == (total,)
    assert np.array_equal(vector, scalar)  # the same operations in the same order: equal, not close
    assert np.all(vector > 0) or schedule.min_lr_ratio == 0.0


def test_the_exponential_decay_is_geometric_from_the_peak_to_the_floor() -> None:
    s = SCHEDULES["wsd exponential"]
    lr = lr_steps(100, 2.0, s)
    start = decay_start(100, s)
    assert start == 70 and np.all(lr[5:start] == 2.0)
    ratios = lr[start:] / np.concatenate([[2.0], lr[start:-1]])
    np.testing.assert_allclose(ratios, 0.1 ** (1 / 30), rtol=1e-12)  # one factor per step, 30 steps
    assert lr[-1] == pytest.approx(0.2, rel=1e-12)  # the floor at the last step
    linear = lr_steps(100, 2.0, s.model_copy(update={"decay_shape": "linear"}))
    assert np.all(lr[start:-1] < linear[start:-1])  # geometric falls faster early on


def test_the_two_stage_schedule_drops_once_at_its_stated_share() -> None:
    s = SCHEDULES["two_stage"]
    lr = lr_steps(200, 1e-3, s)
    assert drop_step(200, s) == 100
    assert np.all(lr[9:100] == 1e-3) and np.all(lr[100:] == pytest.approx(3e-4))
    assert lr[8] == 1e-3 and lr[0] == pytest.approx(1e-3 / 9)  # warmup as any schedule's
    assert drop_step(10, SCHEDULES["two_stage in warmup"]) == 4  # never before the warmup ends


def test_the_fits_rebuild_a_stored_specs_rates_as_the_trainer_steps() -> None:
    """A spec as stored (its JSON) gives the fits the very rates the trainer steps by."""
    for s in SCHEDULES.values():
        stored = s.model_dump(mode="json")
        assert np.array_equal(lr_steps(123, 1e-3, schedule_of(stored)), lr_steps(123, 1e-3, s))
    assert "drop_at" not in ScheduleSpec(kind="wsd").model_dump(mode="json")


@pytest.mark.parametrize("fields,message", [
    ({"kind": "two_stage", "drop_at": 0.5}, "kind two_stage needs drop_lr_ratio"),
    ({"kind": "two_stage"}, "needs drop_at .* and drop_lr_ratio"),
    ({"kind": "cosine", "drop_at": 0.5}, "drop_at and drop_lr_ratio are for kind two_stage, not cosine"),
    ({"kind": "wsd", "decay_shape": "exponential", "min_lr_ratio": 0.0}, "min_lr_ratio must be above 0"),
    ({"kind": "two_stage", "drop_at": 1.0, "drop_lr_ratio": 0.5}, "drop_at"),
    ({"kind": "two_stage", "drop_at": 0.5, "drop_lr_ratio": 0.0}, "drop_lr_ratio"),
    ({"kind": "wsd", "decay_shape": "cubic"}, "decay_shape"),
])
def test_bad_schedule_fields_are_refused_naming_them(fields: dict, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        ScheduleSpec(**fields)


GPT2 = {"n_layer": 2, "d_model": 64, "n_head": 4, "vocab_size": 256, "context": 32}
#: Keys of specs of the schedules that existed before exponential and two-stage ones, computed before them:
#: stored databases hold them, so new schedule fields must leave them as they are.
PINNED_KEYS = {
    "50dc422c9f3f88cf": {},
    "84b05fd933c3a590": {"kind": "constant"},
    "f9d740cca055dc6e": {"kind": "cosine", "min_lr_ratio": 0.0},
    "b9945556b3e42868": {"kind": "wsd"},
    "a0a421e3cd1a8294": {"kind": "wsd", "decay_shape": "1-sqrt", "decay_fraction": 0.3},
    "f9a63ac646e866c4": {"kind": "wsd", "warmup_steps": 3},
}


def _spec(schedule: dict) -> RunSpec:
    return RunSpec.from_dict({"model": GPT2, "tokens": 32 * 8 * 10, "batch_tokens": 32 * 8, "precision": "fp32",
                              "schedule": schedule})


@pytest.mark.parametrize("key,schedule", PINNED_KEYS.items())
def test_the_keys_of_existing_schedules_are_pinned(key: str, schedule: dict) -> None:
    assert _spec(schedule).key == key


def test_new_schedules_get_keys_of_their_own() -> None:
    specs = [_spec({"kind": "wsd", "decay_shape": "exponential"}),
             _spec({"kind": "two_stage", "drop_at": 0.5, "drop_lr_ratio": 0.3}),
             _spec({"kind": "two_stage", "drop_at": 0.5, "drop_lr_ratio": 0.1}),
             _spec({"kind": "two_stage", "drop_at": 0.4, "drop_lr_ratio": 0.3})]
    keys = {s.key for s in specs} | set(PINNED_KEYS)
    assert len(keys) == len(specs) + len(PINNED_KEYS)
    assert all(RunSpec.model_validate_json(s.to_json()).key == s.key for s in specs)  # a stored spec keeps its key


def test_a_schedule_as_another_kind_drops_the_fields_only_its_old_kind_reads() -> None:
    two_stage = ScheduleSpec(kind="two_stage", drop_at=0.6, drop_lr_ratio=0.1, warmup_steps=7)
    wsd = two_stage.with_kind("wsd", decay_fraction=0.2)
    assert (wsd.kind, wsd.drop_at, wsd.drop_lr_ratio, wsd.warmup_steps, wsd.decay_fraction) == ("wsd", None, None, 7, 0.2)
    assert "drop_at" not in wsd.model_dump(mode="json")
    with pytest.raises(ValidationError, match="kind two_stage needs"):
        ScheduleSpec().with_kind("two_stage")
