"""Benchmark the pipeline bubble with real compute: measured idle share vs (p-1)/(v*m+p-1).

Run by hand on a machine with at least two free cores (on a shared machine the ranks' compute
times are whatever the OS grants them, and the figure measures that instead)::

    python benchmarks/bench_pipeline.py                 # pp2, every schedule, m = 4 and 8
    python benchmarks/bench_pipeline.py --d-model 1024 --steps 5

Each rank times its stages' compute, ``forward_one_chunk`` and ``backward_one_chunk`` (one
micro-batch's forward or backward, the loss included; waiting for a peer happens outside
them, in the schedule), and the whole ``Pipeline.step``; idle = 1 - busy/step, the median over
steps, averaged over ranks, printed next to the model and as a ratio (target: within 10%).
The model assumes equal stages and free communication: the first stage's embedding lookup and
the last stage's head and loss make the stages unequal, the point-to-point copies are not free,
so a wide model (compute in the blocks) over a short vocabulary comes closest.
``tests/distributed/test_pipeline.py`` checks the schedules themselves with padded compute.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from typing import Any

import torch
import torch.distributed as dist

SCHEDULES = ("gpipe", "1f1b", "interleaved_1f1b")


def _spec(args: argparse.Namespace, schedule: str, m: int) -> Any:
    from scaling.trainer.spec import RunSpec

    seqs = m * args.micro_batch
    return RunSpec.from_dict({
        "model": {"n_layer": 4, "d_model": args.d_model, "n_head": args.d_model // 64, "vocab_size": 256,
                  "context": args.context},
        "tokens": seqs * args.context * 100, "batch_tokens": seqs * args.context, "precision": "fp32",
        "execution": {"workers": 2, "pp": 2, "pp_schedule": schedule, "micro_batch_size": args.micro_batch,
                      "threads": 1},
    })


def _idle(rank: int, spec: Any, steps: int) -> list[float]:
    from scaling.trainer.parallel.pipeline import build_pipeline
    from scaling.trainer.runtime import Runtime

    pipe = build_pipeline(spec, Runtime.current("cpu"))
    busy = [0.0]

    def timed(fn: Any) -> Any:
        def run(*a: Any, **k: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                busy[0] += time.perf_counter() - t0
        return run

    for stage in pipe.stages:
        stage.forward_one_chunk = timed(stage.forward_one_chunk)
        stage.backward_one_chunk = timed(stage.backward_one_chunk)
    g = torch.Generator().manual_seed(0)
    share = spec.sequences_per_batch
    x = torch.randint(0, 256, (share, spec.model.context), generator=g)
    out = []
    for i in range(steps + 1):
        busy[0] = 0.0
        t0 = time.perf_counter()
        pipe.step(x, x)
        if i:  # the first step also infers the stages' shapes
            out.append(1.0 - busy[0] / (time.perf_counter() - t0))
    return out


def _worker(rank: int, init: str, out: str, cases: list[Any], steps: int) -> None:
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init}", rank=rank, world_size=2)
    try:
        torch.save([_idle(rank, s, steps) for s in cases], os.path.join(out, f"r{rank}.pt"))
        dist.barrier()
    finally:
        dist.destroy_process_group()


def main() -> None:
    from scaling.communication import bubble_fraction
    from scaling.accounting import TRAINER_SCHEDULES

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--d-model", type=int, default=512)
    ap.add_argument("--context", type=int, default=128)
    ap.add_argument("--micro-batch", type=int, default=2)
    ap.add_argument("--steps", type=int, default=3)
    args = ap.parse_args()
    import torch.multiprocessing as mp

    cases = [(sch, m) for sch in SCHEDULES for m in (4, 8)]
    specs = [_spec(args, sch, m) for sch, m in cases]
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(_worker, args=(os.path.join(tmp, "rdv"), tmp, specs, args.steps), nprocs=2, join=True)
        ranks = [torch.load(os.path.join(tmp, f"r{r}.pt"), weights_only=False) for r in range(2)]
    print(f"pp2, GPT L4 d{args.d_model} ctx{args.context}, micro-batch {args.micro_batch}, fp32, gloo, 1 thread/rank")
    print(f"{'schedule':>17} {'m':>3} {'idle measured':>14} {'model':>7} {'ratio':>6}")
    for i, (sch, m) in enumerate(cases):
        model = bubble_fraction(2, m, *TRAINER_SCHEDULES[sch])
        measured = statistics.mean(statistics.median(r[i]) for r in ranks)
        print(f"{sch:>17} {m:>3} {measured:>14.3f} {model:>7.3f} {measured / model:>6.2f}")


if __name__ == "__main__":
    main()
