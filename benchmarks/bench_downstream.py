"""What scoring a run's tasks costs, as a share of its training time, at the default eval interval.

A real trainer (no database) trains a few steps and scores its tasks (the built-in ``next_line``
at its default size) and its held-out loss several times, alternating, in one process so drifts
in machine load hit all three alike. The share is the median scoring time over ``eval_interval``
median steps' time: what a run spends scoring tasks per step it trains. The goal is below 10%.
The same is printed for the example sweep's settings (examples/plan.yaml: context 64, 256-token
batches, eval_interval 1000), where the one evaluation at a run's end counts against the run.

    python benchmarks/bench_downstream.py [--rounds 3] [--steps 2] [--threads 1]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from typing import Any

import torch

from scaling.trainer.loop import Trainer
from scaling.trainer.spec import RunSpec
from scaling.trainer.task_cost import eval_cost

#: A run at the spec's defaults (context 256, 8,192-token batches, eval every 100 steps, 65,536
#: eval tokens) with a 2x128 model, and the example sweep's largest model at its settings (766 steps).
CASES: dict[str, dict[str, Any]] = {
    "defaults, 2x128": {"model": {"n_layer": 2, "d_model": 128, "n_head": 2}, "tokens": 8192 * 100},
    "example, 2x32": {"model": {"n_layer": 2, "d_model": 32, "n_head": 8, "context": 64}, "tokens": 256 * 766,
                      "batch_tokens": 256, "eval_tokens": 16384, "optimizer": {"lr": 3e-2},
                      "execution": {"eval_interval": 1000}},
}


def measure(fields: dict[str, Any], rounds: int, steps: int, threads: int) -> dict[str, float]:
    """Median seconds of one training step, one task scoring and one held-out loss evaluation."""
    torch.set_num_threads(threads)
    execution = {"threads": threads, "device": "cpu", "checkpoint_interval": 10**6, **fields.pop("execution", {})}
    spec = RunSpec.from_dict({"precision": "fp32", **fields, "execution": execution})
    with tempfile.TemporaryDirectory() as tmp:
        trainer = Trainer(spec, None, tmp)
        trainer.start()
        trainer.par.module.train()
        assert trainer.tasks is not None
        trainer.step_once()  # warm up allocations before timing
        step_s, task_s, loss_s = [], [], []
        for _ in range(rounds):
            t0 = time.perf_counter()
            for _ in range(steps):
                trainer.step_once()  # a training step (no evaluation or checkpoint falls in these)
            step_s.append((time.perf_counter() - t0) / steps)
            t0 = time.perf_counter()
            trainer.tasks.evaluate(trainer.par.model, trainer.rt, trainer.par.group)
            task_s.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            trainer.evaluate()
            loss_s.append(time.perf_counter() - t0)
    cost = eval_cost(spec)
    interval = min(spec.execution.eval_interval, spec.steps)
    step, task, loss = (statistics.median(v) for v in (step_s, task_s, loss_s))
    return {"step_s": step, "task_s": task, "loss_s": loss, "interval": interval,
            "share": task / (interval * step), "estimated": cost.fraction * spec.steps / (cost.evaluations * interval),
            "sequences": sum(len(t.sequences) for t in trainer.tasks.tasks)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=2, help="training steps timed per round")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    print(f"{'case':<18} {'step':>9} {'tasks':>9} {'loss eval':>9} {'interval':>8} {'seqs':>6} "
          f"{'share':>7} {'FLOP est.':>9}")
    for name, fields in CASES.items():
        r = measure(dict(fields), args.rounds, args.steps, args.threads)
        print(f"{name:<18} {r['step_s']:>8.3f}s {r['task_s']:>8.3f}s {r['loss_s']:>8.3f}s {r['interval']:>8} "
              f"{r['sequences']:>6} {100 * r['share']:>6.1f}% {100 * r['estimated']:>8.1f}%")
    print("share: task scoring time / (eval_interval x step time), per evaluation; FLOP est.: scaling plan's "
          "estimate for the same (forward FLOPs over training FLOPs). Goal: share < 10% at the defaults.")


if __name__ == "__main__":
    main()
