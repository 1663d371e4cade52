"""Finished reference runs for the early-stopping tests of the training loop: runs of one sweep,
schedule and peak rate, recorded completed in a real database with eval curves whose drop to the
end follows a known law (so the rule's prediction is known to be narrow or wide)."""

from __future__ import annotations

from typing import Any

import numpy as np

from scaling import vocab

#: Reference runs written (more than ``early_stop.MIN_REFERENCES``).
COUNT = 8


def write_references(url: str, sweep: str, fields: dict[str, Any], spread: float, seed: int = 0) -> list[str]:
    """``COUNT`` completed runs shaped like ``fields`` (a RunSpec's fields, without ``early_stop``), of
    10 to 80 steps and three widths, each evaluated at tenths of its steps with eval loss
    3 + (1 - f) * 0.8 * (T / 20)^-0.5 * exp(spread * z) at fraction f (T its steps, z normal);
    their keys."""
    from scaling.db import Store
    from scaling.trainer.spec import RunSpec

    rng = np.random.default_rng(seed)
    batch = int(fields["batch_tokens"])
    specs, curves = [], []
    for i in range(COUNT):
        steps = 10 * (i + 1)
        model = {**fields["model"], "d_model": (16, 32, 48)[i % 3]}
        specs.append(RunSpec.from_dict({**fields, "model": model, "tokens": steps * batch}))
        f = np.arange(1, 11) / 10
        curves.append((steps, 3.0 + (1 - f) * 0.8 * (steps / 20) ** -0.5 * np.exp(spread * rng.standard_normal())))
    with Store(url) as store:
        store.register(sweep, [s.record() for s in specs])
        for spec, (steps, losses) in zip(specs, curves):
            assert store.claim(spec.key, "test", sweep=sweep) is not None
            rows = [(k * steps // 10, k * steps // 10 * batch, 0.0, vocab.EVAL_LOSS, float(v))
                    for k, v in zip(range(1, 11), losses)]
            store.log_metrics(spec.key, rows, sweep=sweep)
            store.complete(spec.key, final_train_loss=float(losses[-1]), final_eval_loss=float(losses[-1]), sweep=sweep)
    return [s.key for s in specs]
