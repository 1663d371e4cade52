"""Collectives on real process groups against the alpha-beta model of ``scaling.comms``.

Measures broadcast, scatter, gather, reduce, all-reduce, all-gather and reduce-scatter on gloo
(CPU, loopback) for world sizes 2-4 over a range of message sizes, fits one link's alpha
(seconds per message step) and beta (seconds per byte) by non-negative least squares on the
relative error over every measurement, and prints the model's prediction against the
measurement with their ratio. Target: every prediction within 1.5x of its measurement after
calibration. A second fit per collective shows how much of any miss is the algorithm the
model assumes rather than the alpha-beta form. With two or more CUDA devices the same runs
on NCCL.

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
from scaling.comms import LINKS, Link, bandwidth_bytes, collective_time, latency_steps  # noqa: E402

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


def fit(rows: list[tuple[str, int, int, float]]) -> Link:
    """alpha, beta >= 0 minimising the squared relative error of the model over ``rows``."""
    a = np.array([[latency_steps(k, n), bandwidth_bytes(k, size, n)] for k, n, size, _ in rows])
    t = np.array([r[3] for r in rows])
    (alpha, beta), _ = nnls(a / t[:, None], np.ones(len(rows)))
    return Link("fitted", float(alpha), float(beta))


def report(backend: str, rows: list[tuple[str, int, int, float]]) -> None:
    link = fit(rows)
    per_kind = {k: fit([r for r in rows if r[0] == k]) for k in KINDS}
    print(f"\n== {backend}: one link fitted to all collectives: alpha = {link.alpha * 1e6:.1f} us, "
          f"beta = {link.beta * 1e9:.3f} ns/B ({1 / link.beta / 1e9 if link.beta else float('inf'):.2f} GB/s)")
    if backend == "gloo":
        d = LINKS["loopback_gloo"]
        print(f"   (table's loopback_gloo: alpha = {d.alpha * 1e6:.1f} us, beta = {d.beta * 1e9:.3f} ns/B)")
    print(f"{'collective':<15}{'n':>3}{'K bytes':>10}{'measured ms':>13}{'model ms':>10}{'ratio':>7}"
          f"{'own-fit ms':>12}{'ratio':>7}")
    worst: dict[str, float] = {}
    worst_own: dict[str, float] = {}
    for kind, n, size, t in rows:
        pred = collective_time(kind, size, n, link)
        own = collective_time(kind, size, n, per_kind[kind])
        r, r_own = pred / t, own / t
        worst[kind] = max(worst.get(kind, 1.0), max(r, 1 / r))
        worst_own[kind] = max(worst_own.get(kind, 1.0), max(r_own, 1 / r_own))
        print(f"{kind:<15}{n:>3}{size:>10}{t * 1e3:>13.3f}{pred * 1e3:>10.3f}{r:>7.2f}{own * 1e3:>12.3f}{r_own:>7.2f}")
    print("\nworst factor (max of model/measured, measured/model) per collective; target <= 1.5")
    print(f"{'collective':<15}{'one link':>10}{'own fit':>10}   own alpha us, beta ns/B")
    for kind in KINDS:
        own = per_kind[kind]
        print(f"{kind:<15}{worst[kind]:>10.2f}{worst_own[kind]:>10.2f}   {own.alpha * 1e6:8.1f} {own.beta * 1e9:8.3f}")
    print("\nmeasurements within 1.5x, by world size: one link | own fit per collective")
    for world in sorted({r[1] for r in rows}):
        sub = [r for r in rows if r[1] == world]
        one = sum(1 for k, n, s, t in sub if 1 / 1.5 <= collective_time(k, s, n, link) / t <= 1.5)
        own = sum(1 for k, n, s, t in sub if 1 / 1.5 <= collective_time(k, s, n, per_kind[k]) / t <= 1.5)
        print(f"  n={world}: {one}/{len(sub)} | {own}/{len(sub)}")


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
