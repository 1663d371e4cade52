"""The simulated trainer's hyperparameter term: a known optimum in lr and batch, zero there,
quadratic in their logs around it, and absent (keys and losses unchanged) when not asked for."""

from __future__ import annotations

import math

import pytest

from scaling.accounting import ShapePolicy
from scaling.errors import SpecError
from scaling.trainer.simulate import simulate
from scaling.trainer.spec import RunSpec

LAW = {"E": 1.8, "A": 480.0, "B": 2100.0, "alpha": 0.35, "beta": 0.37}
TERM = {"k_lr": 0.05, "lr_c": 2.0, "lr_a": -0.3, "lr_b": 0.05, "k_batch": 0.02, "batch_d": 0.5, "batch_e": 0.5}
CONTEXT = 256


def spec(lr: float, batch: int, *, term: dict | None = TERM, N: float = 1e8, D: float = 2**33) -> RunSpec:
    law = {**LAW, "hparams": term} if term is not None else LAW
    return RunSpec.from_dict({
        "model": ShapePolicy().shape_for(N).as_dict(), "tokens": int(D), "batch_tokens": batch,
        "optimizer": {"lr": lr}, "simulate": {"law": law, "noise": 0.0},
    })


def final(s: RunSpec) -> float:
    return simulate(s, None).final_eval_loss


def chinchilla(s: RunSpec) -> float:
    N, D = s.n_params, s.trained_tokens
    return LAW["E"] + LAW["A"] / N ** LAW["alpha"] + LAW["B"] / D ** LAW["beta"]


def optimum(s: RunSpec) -> tuple[float, float]:
    N, D = s.n_params, s.trained_tokens
    return TERM["lr_c"] * N ** TERM["lr_a"] * D ** TERM["lr_b"], TERM["batch_d"] * D ** TERM["batch_e"]


def test_the_penalty_is_zero_at_the_optimum_and_quadratic_in_logs_around_it() -> None:
    probe = spec(1e-3, 2**16)
    lr_opt, b_opt = optimum(probe)  # B* = 0.5 * sqrt(2^33) = 2^15.5 tokens: between two whole batches
    batch = 2**16  # 256 sequences; D = 2^33 is a whole number of such batches
    at = spec(lr_opt, batch)
    assert final(at) == pytest.approx(chinchilla(at) + TERM["k_batch"] * math.log(batch / b_opt) ** 2, rel=1e-12)
    for factor in (0.25, 0.5, 2.0, 4.0):
        off = spec(lr_opt * factor, batch)
        extra = final(off) - final(at)
        assert extra == pytest.approx(TERM["k_lr"] * math.log(factor) ** 2, rel=1e-9)
    # Along a sweep, the lowest loss is at the known optimum of each field.
    lrs = [lr_opt * f for f in (0.125, 0.35, 1.0, 2.8, 8.0)]
    assert min(lrs, key=lambda lr: final(spec(lr, batch))) == lr_opt
    batches = [2**k for k in (12, 14, 15, 16, 18)]  # B* = 2^15.5: 2^15 and 2^16 are equally far in logs
    losses = {b: final(spec(lr_opt, b)) for b in batches}
    assert losses[2**15] == pytest.approx(losses[2**16], rel=1e-12)
    assert min(losses, key=losses.__getitem__) in (2**15, 2**16)
    assert losses[2**15] < losses[2**14] < losses[2**12] and losses[2**16] < losses[2**18]


def test_the_optimum_moves_with_N_and_D_as_the_plan_says() -> None:
    small, large = spec(1e-3, 2**16, N=1e7), spec(1e-3, 2**16, N=1e9)
    (lr_small, _), (lr_large, _) = optimum(small), optimum(large)
    assert lr_large < lr_small  # lr_a < 0: larger models want a smaller learning rate
    for s, lr_opt in ((small, lr_small), (large, lr_large)):
        grid = [lr_small, lr_large, math.sqrt(lr_small * lr_large)]
        best = min(grid, key=lambda lr: final(s.model_copy(update={"optimizer": s.optimizer.model_copy(
            update={"lr": lr})})))
        assert best == lr_opt


def test_without_the_term_losses_and_keys_are_unchanged() -> None:
    plain = spec(1e-3, 2**16, term=None)
    assert "hparams" not in plain.key_fields()["simulate"]["law"]  # stored sweeps keep their keys
    assert final(plain) == pytest.approx(chinchilla(plain), rel=1e-12)
    assert final(spec(3e-1, 2**16, term=None)) == final(plain)  # the lr changes nothing without the term
    assert spec(1e-3, 2**16).key != plain.key


@pytest.mark.parametrize("bad, field", [
    ({**TERM, "k_lr": -1}, "k_lr"), ({**TERM, "lr_c": 0}, "lr_c"), ({**TERM, "batch_e": 5}, "batch_e"),
    ({**TERM, "lr_star": 1}, "lr_star"), ({"lr_c": 1.0}, "k_lr"),
])
def test_a_bad_term_is_one_line_naming_its_field(bad: dict, field: str) -> None:
    with pytest.raises(SpecError, match=rf"simulate\.law\.hparams\.{field}"):
        spec(1e-3, 2**16, term=bad)
