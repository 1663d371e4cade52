"""Hyperparameter groups: a grid block's ``hparams`` multiplies each point into its combinations of
lr, batch and beta2, one run (and key) each, the runs of a point one group; bad sweeps are one line."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from scaling.orchestrator.hparam_groups import (
    Combination,
    Factors,
    HparamsPlan,
    HparamValueError,
    combinations,
    common_tokens,
)


def sweep(**fields: object) -> HparamsPlan:
    return HparamsPlan.model_validate(fields)


# -- the schema and the arithmetic of one point ------------------------------------------------------
def test_values_times_factors_give_every_combination_once() -> None:
    s = sweep(lr={"from": "rule", "factors": [0.5, 1, 2]}, batch_tokens=[512, 1024], beta2=[0.95, 0.99])
    assert s.fields == ("lr", "batch_tokens", "beta2") and s.count == 12 and s.factor_fields() == ("lr",)
    combos = combinations(s, lr=2e-3, batch_tokens=256, beta2=0.9, context=256)
    assert len(combos) == len(set(combos)) == 12
    assert {c.lr for c in combos} == {1e-3, 2e-3, 4e-3}  # factors of the point's own (rule's) lr
    assert {c.batch_tokens for c in combos} == {512, 1024} and {c.beta2 for c in combos} == {0.95, 0.99}


def test_a_field_not_swept_keeps_the_points_own_value() -> None:
    combos = combinations(sweep(lr=[1e-3, 3e-3]), lr=7e-3, batch_tokens=2048, beta2=0.95, context=128)
    assert combos == [Combination(1e-3, 2048, 0.95), Combination(3e-3, 2048, 0.95)]
    assert combos[1].label(["lr"]) == "lr=0.003"


def test_batch_factors_round_to_whole_sequences_and_merge_alike() -> None:
    s = sweep(batch_tokens={"from": "rule", "factors": [0.1, 0.2, 0.7, 2]})
    # 1024 tokens: 0.1x and 0.2x round to one sequence of 256 (at least one), 0.7x to 3, 2x to 8
    assert [c.batch_tokens for c in combinations(s, 1e-3, 1024, 0.95, 256)] == [256, 768, 2048]
    with pytest.raises(HparamValueError, match="rounds to 256 tokens") as exc:
        combinations(sweep(batch_tokens={"from": "rule", "factors": [0.25, 0.5]}), 1e-3, 512, 0.95, 256)
    assert exc.value.field == "batch_tokens"
    with pytest.raises(HparamValueError, match="1000 tokens is not a whole number of sequences of 256"):
        combinations(sweep(batch_tokens=[1000, 2048]), 1e-3, 512, 0.95, 256)


def test_a_points_tokens_are_whole_batches_of_every_combination() -> None:
    assert common_tokens(1_000_000, [512, 1024, 2048]) == 1_001_472  # 489 batches of 2048
    assert common_tokens(4096, [1024, 4096]) == 4096
    with pytest.raises(HparamValueError, match="least common multiple") as exc:
        common_tokens(10_000, [768, 1024])  # lcm 3072: 12,288 tokens is 23% more
    assert exc.value.field == "batch_tokens"


def test_the_group_label_names_the_points_shape_and_tokens() -> None:
    from scaling.naming import group_label, group_title

    assert group_label(2, 64, 4, 3.2e6) == "2x64x4 D=3.2e+06"
    assert group_label(2, 64, 4, 3.2e6) != group_label(2, 64, 4, 3.20001e6) != group_label(2, 64, 2, 3.2e6)
    assert group_title(group_label(2, 16, 2, 1.99885e6)) == "2x16x2 D=2.0M"  # shown by the same rule


def test_the_stored_form_reloads_to_the_same_sweep() -> None:
    s = sweep(lr={"from": "rule", "factors": [0.5, 2]}, beta2=[0.9, 0.95])
    dumped = s.model_dump(mode="json")
    assert dumped["lr"] == {"from": "rule", "factors": [0.5, 2.0]}
    assert HparamsPlan.model_validate(dumped) == s and isinstance(s.lr, Factors)


@pytest.mark.parametrize("fields, expected", [
    ({"lr": []}, "an empty list sweeps nothing"),
    ({"lr": [0, 1e-3]}, "item 0 is 0: a learning rate must be positive"),
    ({"lr": [1e-3, -1e-3]}, "item 1 is -0.001"),
    ({"lr": [1e-3, 1e-3]}, "listed twice"),
    ({"lr": [0.01, 0.0100000000001]}, "items 0 and 1 (0.01 and 0.0100000000001) are equal to 6 significant digits"),
    ({"lr": {"from": "rule", "factors": [1, 3, 1.0000001]}}, "factors: items 0 and 2"),
    ({"lr": [True, 1e-3]}, "True is not a number"),
    ({"lr": "1e-3"}, "expected a list of values"),
    ({"batch_tokens": [512.5, 1024]}, "whole number of tokens"),
    ({"beta2": [0.9, 1.0]}, "less than 1"),
    ({"momentum": [0.9, 0.95]}, "'momentum' is not a hyperparameter"),
    ({}, "names no hyperparameter"),
    ({"beta2": {"from": "rule", "factors": [1, 2]}}, "beta2 has no rule"),
    ({"lr": {"from": "train", "factors": [1, 2]}}, "write from: rule"),
    ({"lr": {"factors": [1, 2]}}, "from: required field is missing"),
    ({"lr": {"from": "rule", "factors": [1, 0]}}, "factors: item 1 is 0"),
    ({"lr": [1e-3]}, "one combination (lr 0.001) is a setting, not a sweep"),
    ({"lr": {"from": "rule", "factors": [1]}}, "one combination (lr 1 x the rule)"),
])
def test_a_bad_sweep_is_refused_naming_the_problem(fields: dict, expected: str) -> None:
    with pytest.raises(ValidationError) as exc:
        HparamsPlan.model_validate(fields)
    assert expected in str(exc.value.errors()[0]["msg"])
