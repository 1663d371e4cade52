"""What scoring a run's tasks costs, as a share of its training time, at the default eval interval.

A real trainer (no database) trains a few steps and scores its tasks (the built-in ``next_line``
at its default size) and its held-out loss several times, alternating, in one process so drifts
in machine load hit all three alike. The share is the median scoring time over ``eval_interval``
median steps' time: what a run spends scoring tasks per step it trains. The goal is below 10%.
The same is printed for the example sweep's settings (examples/plan.yaml: context 64, 256-token
batches, eval_interval 1000), where the one evaluation at a run's end counts against the run.

With ``--above-chance STEPS`` it also trains a tiny byte model (2 layers, 64 wide, context 64,
1,024-token batches) for STEPS steps on the built-in corpus and prints its ``next_line`` accuracy
on 256 items before and after, against the 0.25 of a guess, with the binomial standard error.

    python benchmarks/bench_downstream.py [--rounds 3] [--steps 2] [--threads 1] [--above-chance 400]
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
from scaling.trainer.evaluation.task_cost import eval_cost

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
            trainer.task_scores()
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


def above_chance(steps: int, threads: int) -> None:
    """A tiny model's next_line accuracy before and after ``steps`` training steps."""
    torch.set_num_threads(threads)
    spec = RunSpec.from_dict({
        "model": {"n_layer": 2, "d_model": 64, "n_head": 4, "context": 64}, "tokens": 64 * 16 * steps,
        "batch_tokens": 64 * 16, "eval_tokens": 4096, "precision": "fp32", "optimizer": {"lr": 1e-2},
        "evals": {"next_line": {"items": 256}},
        "execution": {"eval_interval": 10**6, "checkpoint_interval": 10**6, "threads": threads, "device": "cpu"},
    })
    with tempfile.TemporaryDirectory() as tmp:
        trainer = Trainer(spec, None, tmp)
        assert trainer.tasks is not None
        acc = "task/next_line/acc"
        before = trainer.task_scores()[acc]
        trainer.start()
        trainer.par.module.train()
        while trainer.step < trainer.total_steps - 1:  # the last step would evaluate and save
            trainer.step_once()
        after = trainer.task_scores()[acc]
        loss = trainer.evaluate()
    se = (0.25 * 0.75 / 256) ** 0.5
    print(f"next_line, 256 items: accuracy {before:.3f} untrained, {after:.3f} after {trainer.step} steps "
          f"(held-out loss {loss:.3f} nats/byte); chance 0.25, standard error of a guess {se:.3f}: "
          f"{(after - 0.25) / se:.1f} standard errors above chance")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=2, help="training steps timed per round")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--above-chance", type=int, default=0, metavar="STEPS",
                    help="also train a tiny model this many steps and print its next_line accuracy")
    args = ap.parse_args()
    if args.above_chance:
        above_chance(args.above_chance, args.threads)
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
