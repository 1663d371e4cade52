"""A simulated sweep whose runs' eval losses follow a known curve law, each size trained under several schedules.

For tests of what is made from a sweep's curve laws (the schedule advice, the report's section): at each
of three sizes, cosine runs of three lengths, and at the middle size a constant and a WSD run of the
middle length too (so that one size has a curve law: the fits stay quick), every run registered,
claimed, simulated and completed through the real store. The loss is Luo et al.'s
published multi-power law in the run's own schedule plus A / N^alpha for its size (the plan's
``simulate`` section), with noise.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from scaling.trainer.spec import RunSpec

#: Luo et al.'s multi-power law of their 25M model, the curve every run follows.
CURVE = {"form": "multi-power", "L0": 3.0405, "A": 0.5247, "alpha": 0.5079, "B": 363.79, "C": 2.0656,
         "beta": 0.5828, "gamma": 0.6414}
WIDTHS = (16, 32, 48)
BATCH, PEAK = 1024, 3e-4
STEPS = (800, 1200, 1600)


def spec(d_model: int, steps: int, schedule: dict[str, Any], *, seed: int = 0, evals: int = 12) -> RunSpec:
    """A simulated run of ``steps`` steps at width ``d_model`` under ``schedule``."""
    return RunSpec.from_dict({
        "model": {"n_layer": 2, "d_model": d_model, "n_head": 2, "context": 256}, "tokens": steps * BATCH,
        "batch_tokens": BATCH, "optimizer": {"lr": PEAK},
        "schedule": {"warmup_steps": 80, "min_lr_ratio": 0.1, **schedule},
        "simulate": {"law": {"E": 0.0, "A": 60.0, "B": 1e-6, "alpha": 0.34, "beta": 1.0}, "noise": 0.001,
                     "seed": seed, "curve": {**CURVE, "evals": evals}},
    })


def specs() -> list[RunSpec]:
    """The sweep's runs: per width, cosine at every length; at the middle width also constant and WSD (20%
    linear decay) at the middle length."""
    out = [spec(w, s, {"kind": "cosine"}) for w in WIDTHS for s in STEPS]
    return out + [spec(WIDTHS[1], STEPS[1], {"kind": "constant"}),
                  spec(WIDTHS[1], STEPS[1], {"kind": "wsd", "decay_fraction": 0.2})]


def build(url: str, folder: Path, sweep: str = "curves") -> list[RunSpec]:
    """Every run of :func:`specs` simulated and completed in ``url`` as sweep ``sweep``."""
    from scaling import vocab
    from scaling.db import Store
    from scaling.trainer import train

    runs = specs()
    with Store(url) as store:
        store.register(sweep, [s.record() for s in runs])
        for s in runs:
            store.claim(s.key, "test:1", sweep=sweep)
            r = train(s, url, folder, attempt=1, sweep=sweep)
            store.finish(s.key, vocab.COMPLETED, final_train_loss=r.final_train_loss,
                         final_eval_loss=r.final_eval_loss, sweep=sweep)
    return runs
