"""Collectives on real process groups against the alpha-beta model of ``scaling.comms``.

Measures broadcast, scatter, gather, reduce, all-reduce, all-gather and reduce-scatter on gloo
(CPU, loopback) for world sizes 2-4 over a range of message sizes, and fits two models of one
link each by non-negative least squares on the relative error over every measurement:

* textbook: the ring/tree algorithms with alpha (seconds per message step) and beta (seconds per
  byte), a core per rank: what the planner assumes for NCCL;
* gloo: gloo's own algorithms (its reduce is a ring reduce-scatter plus a gather, its
  reduce-scatter a whole all-reduce), the copies ProcessGroupGloo makes around them (copy_beta
  seconds per byte), and ranks beyond the host's cores sharing them (``host_share``).

It prints both predictions against each measurement with their ratios. Target: every
prediction of the backend's own model within 1.5x of its measurement after calibration. With
two or more CUDA devices the same runs on NCCL against the textbook model.

    python benchmarks/bench_collectives.py [--worlds 2 3 4] [--sizes 4096 65536 1048576 4194304] [--reps 10]

Payload K is the full tensor a collective works on (the all-gather's output, the
reduce-scatter's input, the scatter's whole list); see ``scaling.comms.wire_bytes``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import warnings

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from scipy.optimize import nnls

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from scaling.comms import (  # noqa: E402
    LINKS,
    Link,
    bandwidth_bytes,
    collective_time,
    copy_bytes,
    host_share,
    latency_steps,
)

TARGET = 1.5
KINDS = ("broadcast", "scatter", "gather", "reduce", "all_reduce", "all_gather", "reduce_scatter")


def _op(kind: str, nbytes: int, rank: int, world: int, device: torch.device):
    """A closure running one ``kind`` collective on a payload of ``nbytes`` bytes."""
    n = nbytes // 4 // world * world  # float32 elements, divisible by the world size
    full = torch.ones(n, device=device)
    part = torch.ones(n // world, device=device)
    parts = [torch.ones(n // world, device=device) for _ in range(world)]
    if kind == "broadcast":
        return lambda: dist.broadcast(full, src=0)
    if kind == "reduce":
        return lambda: dist.reduce(full, dst=0)
    if kind == "all_reduce":
        return lambda: dist.all_reduce(full)
    if kind == "scatter":
        return lambda: dist.scatter(part, parts if rank == 0 else None, src=0)
    if kind == "gather":
        return lambda: dist.gather(part, parts if rank == 0 else None, dst=0)
    if kind == "all_gather":
        return lambda: dist.all_gather_into_tensor(full, part)
    if kind == "reduce_scatter":
        return lambda: dist.reduce_scatter_tensor(part, full)
    raise ValueError(kind)


def _worker(rank: int, world: int, init: str, out: str, backend: str, sizes: list[int], reps: int) -> None:
    warnings.filterwarnings("ignore", category=FutureWarning)  # reduce_scatter_tensor's new name
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)
    device = torch.device("cuda", rank) if backend == "nccl" else torch.device("cpu")
    if backend == "nccl":
        torch.cuda.set_device(device)
    dist.init_process_group(backend, init_method=f"file://{init}", rank=rank, world_size=world)
    rows = []
    try:
        for kind in KINDS:
            for size in sizes:
                op = _op(kind, size, rank, world, device)
                op()  # warm up (connections, buffers)
                samples = []
                for _ in range(reps):
                    dist.barrier()
                    if backend == "nccl":
                        torch.cuda.synchronize()
                    t0 = time.perf_counter()
                    op()
                    if backend == "nccl":
                        torch.cuda.synchronize()
                    samples.append(time.perf_counter() - t0)
                # The fastest repetition: on a shared machine the slower ones time the scheduler.
                # The collective ends when its slowest rank does.
                t = torch.tensor([min(samples)], dtype=torch.float64, device=device)
                dist.all_reduce(t, op=dist.ReduceOp.MAX)
                rows.append((kind, world, size // 4 // world * world * 4, float(t.item())))
        if rank == 0:
            torch.save(rows, os.path.join(out, f"rows{world}.pt"))
        dist.barrier()
    finally:
        dist.destroy_process_group()


def measure(backend: str, worlds: list[int], sizes: list[int], reps: int) -> list[tuple[str, int, int, float]]:
    rows: list[tuple[str, int, int, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for world in worlds:
            init = os.path.join(tmp, f"rendezvous{world}")
            mp.spawn(_worker, args=(world, init, tmp, backend, sizes, reps), nprocs=world, join=True)
            rows += torch.load(os.path.join(tmp, f"rows{world}.pt"))
    return rows


def host_cores() -> int:
    """Cores this process may run on: ranks beyond them share (``scaling.comms.host_share``)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def fit(rows: list[tuple[str, int, int, float]], library: str, cores: int | None) -> Link:
    """alpha, beta (and, for gloo, copy_beta) >= 0 minimising the squared relative error over ``rows``.

    ``library`` picks the algorithms whose steps, bytes and copies the model counts
    (``scaling.comms``); ``cores`` the host the ranks share (None: one core per rank).
    """
    def terms(kind: str, n: int, size: int) -> list[float]:
        share = host_share(kind, n, cores, "bytes")
        out = [latency_steps(kind, n, library) * host_share(kind, n, cores, "latency"),
               bandwidth_bytes(kind, size, n, library) * share]
        if library == "gloo":
            out.append(copy_bytes(kind, size, n, library) * share)
        return out

    a = np.array([terms(k, n, size) for k, n, size, _ in rows])
    t = np.array([r[3] for r in rows])
    coef, _ = nnls(a / t[:, None], np.ones(len(rows)))
    copy = float(coef[2]) if library == "gloo" else 0.0
    return Link(f"fitted_{library}", float(coef[0]), float(coef[1]), copy, library)  # type: ignore[arg-type]


def _within(ratio: float) -> bool:
    return 1 / TARGET <= ratio <= TARGET


def report(backend: str, rows: list[tuple[str, int, int, float]]) -> bool:
    """Print the textbook model and the backend's own against the measurements.

    Returns whether the backend's own model meets the target on every measurement.
    """
    cores = host_cores() if backend == "gloo" else None
    library = "gloo" if backend == "gloo" else "nccl"
    textbook = fit(rows, "nccl", None)
    own = fit(rows, library, cores)
    print(f"\n== {backend}: {len(rows)} measurements; ranks share {cores or 'one device each'} "
          f"{'cores' if cores else ''}")
    print(f"textbook (ring/tree algorithms, a core per rank): alpha = {textbook.alpha * 1e6:.1f} us, "
          f"beta = {textbook.beta * 1e9:.3f} ns/B")
    print(f"{library} (its algorithms, copies and shared cores): alpha = {own.alpha * 1e6:.1f} us, "
          f"beta = {own.beta * 1e9:.3f} ns/B, copy = {own.copy_beta * 1e9:.3f} ns/B")
    if backend == "gloo":
        d = LINKS["loopback_gloo"]
        print(f"   (table's loopback_gloo: alpha = {d.alpha * 1e6:.1f} us, beta = {d.beta * 1e9:.3f} ns/B, "
              f"copy = {d.copy_beta * 1e9:.3f} ns/B)")
    print(f"{'collective':<15}{'n':>3}{'K bytes':>10}{'measured ms':>13}{'textbook ms':>13}{'ratio':>7}"
          f"{library + ' ms':>10}{'ratio':>7}")
    worst_text: dict[str, float] = {}
    worst_own: dict[str, float] = {}
    for kind, n, size, t in rows:
        t_text = collective_time(kind, size, n, textbook)
        t_own = collective_time(kind, size, n, own, cores)
        r_text, r_own = t_text / t, t_own / t
        worst_text[kind] = max(worst_text.get(kind, 1.0), r_text, 1 / r_text)
        worst_own[kind] = max(worst_own.get(kind, 1.0), r_own, 1 / r_own)
        flag = "" if _within(r_own) else "  <- outside"
        print(f"{kind:<15}{n:>3}{size:>10}{t * 1e3:>13.3f}{t_text * 1e3:>13.3f}{r_text:>7.2f}"
              f"{t_own * 1e3:>10.3f}{r_own:>7.2f}{flag}")
    print(f"\nworst factor (max of model/measured, measured/model) per collective; target <= {TARGET}")
    print(f"{'collective':<15}{'textbook':>10}{library:>10}")
    for kind in KINDS:
        print(f"{kind:<15}{worst_text[kind]:>10.2f}{worst_own[kind]:>10.2f}")
    print(f"\nmeasurements within {TARGET}x, by world size: textbook | {library}")
    met = 0
    for world in sorted({r[1] for r in rows}):
        sub = [r for r in rows if r[1] == world]
        n_text = sum(1 for k, n, s, t in sub if _within(collective_time(k, s, n, textbook) / t))
        n_own = sum(1 for k, n, s, t in sub if _within(collective_time(k, s, n, own, cores) / t))
        met += n_own
        print(f"  n={world}: {n_text}/{len(sub)} | {n_own}/{len(sub)}")
    ok = met == len(rows)
    print(f"{library} model: {met}/{len(rows)} within {TARGET}x -> target {'met' if ok else 'NOT met'}")
    return ok


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worlds", type=int, nargs="+", default=[2, 3, 4])
    parser.add_argument("--sizes", type=int, nargs="+", default=[4096, 65536, 1048576, 4194304])
    parser.add_argument("--reps", type=int, default=10)
    args = parser.parse_args()
    warnings.filterwarnings("ignore", category=FutureWarning)
    report("gloo", measure("gloo", args.worlds, args.sizes, args.reps))
    if torch.cuda.is_available() and torch.cuda.device_count() >= 2:
        worlds = [w for w in args.worlds if w <= torch.cuda.device_count()]
        report("nccl", measure("nccl", worlds, args.sizes, args.reps))
    else:
        print("\nnccl: skipped (needs two or more CUDA devices)")


if __name__ == "__main__":
    main()
