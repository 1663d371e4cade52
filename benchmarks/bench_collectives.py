"""Collectives on real process groups against the alpha-beta model of ``scaling.communication``.

Measures broadcast, scatter, gather, reduce, all-reduce, all-gather and reduce-scatter on gloo
(CPU, loopback) for world sizes 2-4, and a point-to-point send on 2 ranks, over a range of
message sizes, and fits two models of one link each by non-negative least squares on the
relative error over every measurement:

* textbook: the ring/tree algorithms with alpha (seconds per message step) and beta (seconds per
  byte), a core per rank: what the planner assumes for NCCL;
* gloo: gloo's own algorithms (its reduce is a ring reduce-scatter plus a gather, its
  reduce-scatter a whole all-reduce), the copies ProcessGroupGloo makes around them (copy_beta
  seconds per byte), the additions of its reductions on the CPU (reduce_beta seconds per byte
  reduced, Thakur et al.'s gamma), and ranks beyond the host's cores sharing them (``host_share``).

It prints both predictions against each measurement with their ratios. Target: every
prediction of the backend's own model within 1.5x of its measurement after calibration. With
two or more CUDA devices the same runs on NCCL against the textbook model.

Then, per layout (dp, tp, pp and the ZeRO stage on 2-4 gloo ranks), the communication of one
training step: each rank issues what ``scaling.communication`` says its stage issues per step (its
data-parallel collectives, the tensor-parallel activation all-reduces, the pipeline's sends
and receives and the tied-embedding all-reduce) on the layout's own process groups (ranks
tensor-innermost, as the trainer's mesh), every group at once as in training. The traffic
list is the model's; that it equals what the trainer hands ``torch.distributed`` is what the
wire tests check (``tests/distributed/test_comms.py``, ``test_tensor_parallel.py``,
``test_pipeline.py``). Measured: the slowest rank's time for its list; predicted:
``step_comm_time``'s sum for the busiest rank with the calibrated link, where a layout with
more ranks than cores gives each group its share of the host's cores. Target: each layout
within 1.5x.

    python benchmarks/bench_collectives.py [--worlds 2 3 4] [--sizes 4096 65536 1048576 4194304] [--reps 10]
                                           [--layouts all|none|NAME ...]

Payload K is the full tensor a collective works on (the all-gather's output, the
reduce-scatter's input, the scatter's whole list); see ``scaling.communication.wire_bytes``.
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
from scaling.accounting import Shape  # noqa: E402
from scaling.communication import (
    LINKS,
    Link,
    Traffic,
    bandwidth_bytes,
    collective_time,
    copy_bytes,
    dp_traffic,
    reduce_bytes,
    host_share,
    latency_steps,
    pp_traffic,
    step_traffic,
    tp_traffic,
)
from scaling.accounting import ParallelLayout, params_per_rank

TARGET = 1.5
KINDS = ("broadcast", "scatter", "gather", "reduce", "all_reduce", "all_gather", "reduce_scatter", "send_recv")


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
    if kind == "send_recv":  # rank 0 to rank 1, as a pipeline stage hands on its activations
        return lambda: dist.send(full, 1) if rank == 0 else dist.recv(full, 0)
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
            if kind == "send_recv" and world != 2:  # a pair of ranks
                continue
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
                # The median repetition: a step is a run of collectives, and each meets the
                # scheduler's wake-ups as the typical one does, not as the luckiest.
                # The collective ends when its slowest rank does.
                t = torch.tensor([float(np.median(samples))], dtype=torch.float64, device=device)
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
    """Cores this process may run on: ranks beyond them share (``scaling.communication.host_share``)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def fit(rows: list[tuple[str, int, int, float]], library: str, cores: int | None) -> Link:
    """alpha, beta (and, for gloo, copy_beta) >= 0 minimising the squared relative error over ``rows``.

    ``library`` picks the algorithms whose steps, bytes and copies the model counts
    (``scaling.communication``); ``cores`` the host the ranks share (None: one core per rank).
    """
    def terms(kind: str, n: int, size: int) -> list[float]:
        share = host_share(kind, n, cores, "bytes")
        out = [latency_steps(kind, n, library) * host_share(kind, n, cores, "latency"),
               bandwidth_bytes(kind, size, n, library) * share]
        if library == "gloo":
            out += [copy_bytes(kind, size, n, library) * share, reduce_bytes(kind, size, n, library) * share]
        return out

    a = np.array([terms(k, n, size) for k, n, size, _ in rows])
    t = np.array([r[3] for r in rows])
    coef, _ = nnls(a / t[:, None], np.ones(len(rows)))
    copy, reduce = (float(coef[2]), float(coef[3])) if library == "gloo" else (0.0, 0.0)
    return Link(f"fitted_{library}", float(coef[0]), float(coef[1]), copy, library, reduce)  # type: ignore[arg-type]


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
          f"beta = {own.beta * 1e9:.3f} ns/B, copy = {own.copy_beta * 1e9:.3f} ns/B, "
          f"reduce = {own.reduce_beta * 1e9:.3f} ns/B")
    if backend == "gloo":
        d = LINKS["loopback_gloo"]
        print(f"   (table's loopback_gloo: alpha = {d.alpha * 1e6:.1f} us, beta = {d.beta * 1e9:.3f} ns/B, "
              f"copy = {d.copy_beta * 1e9:.3f} ns/B, reduce = {d.reduce_beta * 1e9:.3f} ns/B)")
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
    for kind in (k for k in KINDS if k in worst_own):
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


# -- per layout -------------------------------------------------------------------------------------

#: A model whose step moves megabytes (3.2M parameters; activations of 4 x 128 x 256), so that
#: bytes, not wake-ups, make up most of each layout's time, as they do at scale.
LAYOUT_SHAPE = Shape(n_layer=4, d_model=256, n_head=4, vocab_size=256, context=128)
LAYOUTS: dict[str, dict[str, object]] = {
    "dp2 ddp": dict(dp=2, strategy="ddp"),
    "dp2 zero1": dict(dp=2, strategy="zero1"),
    "dp2 zero2 m2": dict(dp=2, strategy="zero2", micro_batches=2),
    "dp2 zero3 m2": dict(dp=2, strategy="zero3", micro_batches=2),
    "tp2 m2": dict(tp=2, micro_batches=2, micro_batch=4),
    "pp2 m4": dict(pp=2, micro_batches=4, micro_batch=4),
    "dp4 zero3 m2": dict(dp=4, strategy="zero3", micro_batches=2),
    "tp2 dp2 zero3 m2": dict(tp=2, dp=2, strategy="zero3", micro_batches=2, micro_batch=4),
    "pp2 dp2 zero3 m4": dict(pp=2, dp=2, strategy="zero3", micro_batches=4, micro_batch=4),
    "tp2 pp2 m4": dict(tp=2, pp=2, micro_batches=4, micro_batch=4),
}
PRECISION = "fp32"  # what gloo on a CPU trains in


def coords(rank: int, layout: ParallelLayout) -> tuple[int, int, int]:
    """(tp, dp, pp) index of a global rank: tensor innermost, then data, then pipeline (the trainer's mesh)."""
    return rank % layout.tp, rank // layout.tp % layout.dp, rank // (layout.tp * layout.dp)


def group_ranks(layout: ParallelLayout, dim: str) -> list[list[int]]:
    """Every group of dimension ``dim`` (tp, dp or pp) as lists of global ranks."""
    groups: dict[tuple[int, int], list[int]] = {}
    for r in range(layout.world):
        t, d, p = coords(r, layout)
        key = {"tp": (d, p), "dp": (t, p), "pp": (t, d)}[dim]
        groups.setdefault(key, []).append(r)
    return list(groups.values())


def rank_traffic(layout: ParallelLayout, stage: int) -> list[Traffic]:
    """What one rank of pipeline ``stage`` issues per step by the model (the pipeline's traffic separately)."""
    params = params_per_rank(LAYOUT_SHAPE, layout.tp, layout.pp, stage)
    return (dp_traffic(params, layout.strategy, layout.dp, PRECISION, layout.micro_batches)
            + tp_traffic(LAYOUT_SHAPE, layout, PRECISION))


def _script(rank: int, layout: ParallelLayout, groups: dict[str, object]) -> list:
    """The calls one rank makes: tensor-parallel, then pipeline, then data-parallel (every rank in
    the same order, so no group waits on a rank busy in another)."""
    stage = coords(rank, layout)[2]
    calls: list = []

    def collective(t: Traffic) -> None:
        g = groups[t.group]
        n = t.n
        elems = max(n, int(t.payload) // 4 // n * n)
        full = torch.ones(elems)
        part = torch.ones(elems // n)
        root = dist.get_global_rank(g, 0)  # type: ignore[arg-type]
        op = {"all_reduce": lambda: dist.all_reduce(full, group=g),
              "all_gather": lambda: dist.all_gather_into_tensor(full, part, group=g),
              "reduce_scatter": lambda: dist.reduce_scatter_tensor(part, full, group=g),
              "broadcast": lambda: dist.broadcast(full, src=root, group=g)}[t.kind]
        calls.extend([op] * int(t.calls))

    own = rank_traffic(layout, stage)
    for t in (t for t in own if t.group == "tp"):
        collective(t)
    if layout.pp > 1:  # 2 stages: activations forward from stage 0, their gradients back from stage 1
        first = pp_traffic(LAYOUT_SHAPE, layout, PRECISION)
        peer = rank + (1 if stage == 0 else -1) * layout.tp * layout.dp
        act = torch.ones(int(first[0].payload) // 4)
        m = int(first[0].calls)
        if stage == 0:
            calls.extend([lambda: dist.send(act, peer)] * m + [lambda: dist.recv(act, peer)] * m)
        else:
            calls.extend([lambda: dist.recv(act, peer)] * m + [lambda: dist.send(act, peer)] * m)
        collective(next(t for t in first if t.kind == "all_reduce"))  # the tied embedding's gradient
    for t in (t for t in own if t.group == "dp"):
        collective(t)
    return calls


def _layout_worker(rank: int, world: int, init: str, out: str, name: str, reps: int) -> None:
    warnings.filterwarnings("ignore", category=FutureWarning)
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)
    layout = ParallelLayout(**LAYOUTS[name])  # type: ignore[arg-type]
    dist.init_process_group("gloo", init_method=f"file://{init}", rank=rank, world_size=world)
    try:
        groups: dict[str, object] = {}
        for dim in ("tp", "dp", "pp"):
            mine, _ = dist.new_subgroups_by_enumeration(group_ranks(layout, dim))
            groups[dim] = mine
        calls = _script(rank, layout, groups)
        for call in calls:  # warm up (connections, buffers)
            call()
        samples = []
        for _ in range(reps):
            dist.barrier()
            t0 = time.perf_counter()
            for call in calls:
                call()
            samples.append(time.perf_counter() - t0)
        t = torch.tensor([float(np.median(samples))], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)  # the step's communication ends with its slowest rank
        if rank == 0:
            torch.save(float(t.item()), os.path.join(out, "layout.pt"))
        dist.barrier()
    finally:
        dist.destroy_process_group()


def predicted_layout_time(layout: ParallelLayout, link: Link, cores: int | None) -> float:
    """``step_comm_time`` of the busiest rank, each group sharing the host's cores in proportion to its ranks."""
    total = 0.0
    for t in step_traffic(LAYOUT_SHAPE, layout, PRECISION):
        share = None if cores is None or layout.world <= cores else cores * t.n / layout.world
        total += t.calls * collective_time(t.kind, t.payload, t.n, link, share)  # type: ignore[arg-type]
    return total


def report_layouts(names: list[str], link: Link, reps: int) -> bool:
    """Measure each layout's step communication and print it against the model's."""
    cores = host_cores()
    print(f"\n== per layout: one step's communication of a {LAYOUT_SHAPE.params_total:,}-parameter model "
          f"({LAYOUT_SHAPE.n_layer}x{LAYOUT_SHAPE.d_model}, context {LAYOUT_SHAPE.context}, {PRECISION}) on gloo, "
          f"{cores} cores, the calibrated gloo link")
    print(f"{'layout':<20}{'ranks':>6}{'MB sent':>9}{'measured ms':>13}{'model ms':>10}{'ratio':>7}")
    met = 0
    with tempfile.TemporaryDirectory() as tmp:
        for i, name in enumerate(names):
            layout = ParallelLayout(**LAYOUTS[name])  # type: ignore[arg-type]
            init = os.path.join(tmp, f"rendezvous-layout{i}")
            mp.spawn(_layout_worker, args=(layout.world, init, tmp, name, reps), nprocs=layout.world, join=True)
            measured = torch.load(os.path.join(tmp, "layout.pt"))
            model = predicted_layout_time(layout, link, cores)
            sent = sum(t.wire_bytes_per_step for t in step_traffic(LAYOUT_SHAPE, layout, PRECISION)) / 1e6
            ratio = model / measured
            met += _within(ratio)
            print(f"{name:<20}{layout.world:>6}{sent:>9.1f}{measured * 1e3:>13.2f}{model * 1e3:>10.2f}{ratio:>7.2f}"
                  f"{'' if _within(ratio) else '  <- outside'}")
    ok = met == len(names)
    print(f"per-layout model: {met}/{len(names)} within {TARGET}x -> target {'met' if ok else 'NOT met'}")
    return ok


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worlds", type=int, nargs="+", default=[2, 3, 4])
    parser.add_argument("--sizes", type=int, nargs="+", default=[4096, 65536, 1048576, 4194304])
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--layouts", nargs="+", default=["all"],
                        help=f"'all', 'none' or names among: {', '.join(LAYOUTS)}")
    args = parser.parse_args()
    warnings.filterwarnings("ignore", category=FutureWarning)
    names = list(LAYOUTS) if args.layouts == ["all"] else [] if args.layouts == ["none"] else args.layouts
    unknown = [n for n in names if n not in LAYOUTS]
    if unknown:
        parser.error(f"unknown layout(s) {unknown}; use {list(LAYOUTS)}")
    rows = measure("gloo", args.worlds, args.sizes, args.reps)
    report("gloo", rows)
    if names:
        report_layouts(names, fit(rows, "gloo", host_cores()), args.reps)
    if torch.cuda.is_available() and torch.cuda.device_count() >= 2:
        worlds = [w for w in args.worlds if w <= torch.cuda.device_count()]
        report("nccl", measure("nccl", worlds, args.sizes, args.reps))
    else:
        print("\nnccl: skipped (needs two or more CUDA devices)")


if __name__ == "__main__":
    main()
