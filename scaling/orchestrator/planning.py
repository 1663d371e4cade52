"""`scaling plan`: the resolved runs of a plan with their sizes, memory and estimated time.

Nothing is trained or written. Memory and strategy come from `scaling.accounting`; time is a
rough estimate from the real FLOPs of a step (attention and embeddings counted) at a throughput
per worker that the plan may set (``resources.throughput_flops``), else a share of the CPU's probed
matmul rate in the runs' resolved precision, or a GPU default for that precision.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

from scaling.orchestrator.expand import Expansion, PlannedRun, expand
from scaling.orchestrator.plan import Plan, load_plan

#: Achieved share of one core's probed matmul peak (`scaling.trainer.mfu`, in the run's
#: precision), per thread: the trainer reaches 66% per CPU-second for a 4-layer d_model-256 model
#: (benchmarks/bench_trainer.py); smaller matmuls reach less. GPU: about 40% of a current
#: accelerator's dense peak (~1e15 FLOP/s in bf16/fp16, ~67e12 in fp32).
CPU_PEAK_FRACTION = 0.5
GPU_THROUGHPUT_FLOPS = {"bf16": 4e14, "fp16": 4e14, "fp32": 2.7e13}
#: Fixed cost of one optimizer step (Python, kernel launches, logging): it dominates for the
#: tiny CPU models of the example (about 10 ms a step measured on a laptop core).
CPU_STEP_SECONDS = 0.010
GPU_STEP_SECONDS = 0.005


def throughput(plan: Plan, precision: Optional[str] = None) -> float:
    """FLOP/s one worker achieves in ``precision`` (default: the expanded plan's resolved one):
    the plan's figure, else a share of the probed CPU peak (cached) or a GPU default."""
    r = plan.resources
    if r.throughput_flops is not None:
        return r.throughput_flops
    precision = precision or plan.train.precision
    if r.gpus_per_worker > 0:
        return GPU_THROUGHPUT_FLOPS[precision] * r.gpus_per_worker
    from scaling.trainer.precision import cpu_rate

    # One core's rate times the threads: a one-thread probe is not thrown off by a busy machine.
    return CPU_PEAK_FRACTION * cpu_rate(precision, 1) * plan.train.threads


def estimated_seconds(run: PlannedRun, plan: Plan) -> float:
    """Wall time of one run: the real training FLOPs over the workers' throughput (0 when simulated)."""
    if run.spec.simulate is not None:
        return 0.0  # a simulated run writes a few rows in milliseconds
    shape = run.spec.shape
    real_flops = shape.flops_per_token("6N_attention", "total") * run.spec.steps * run.spec.batch_tokens
    per_step = GPU_STEP_SECONDS if plan.resources.gpus_per_worker > 0 else CPU_STEP_SECONDS
    rate = throughput(plan, run.spec.precision)
    return run.spec.steps * per_step + real_flops / (rate * run.spec.execution.workers)


def corpus_tokens(run: PlannedRun) -> Optional[int]:
    """Tokens in the training corpus, when the data has been resolved."""
    return run.spec.data.unique_tokens


def run_row(run: PlannedRun, plan: Plan) -> dict[str, Any]:
    spec = run.spec
    shape = spec.shape
    corpus = corpus_tokens(run)
    return {
        "key": spec.key,
        "N": spec.n_params,
        "N_total": shape.params_total,
        "shape": f"{shape.n_layer}x{shape.d_model}/{shape.n_head}h",
        "n_layer": shape.n_layer,
        "d_model": shape.d_model,
        "n_head": shape.n_head,
        "D": spec.tokens,
        "C": spec.flops,
        "budget": run.budget,
        "tokens_per_param": spec.tokens / spec.n_params,
        "epochs": (spec.tokens / corpus) if corpus else None,
        "lr": spec.optimizer.lr,
        "batch_tokens": spec.batch_tokens,
        "steps": spec.steps,
        "seed": spec.seed,
        "workers": spec.execution.workers,
        "memory_gib": run.memory_gib,
        "strategy": run.strategy,
        "precision": spec.precision,
        "est_seconds": estimated_seconds(run, plan),
    }


def concurrency(plan: Plan, num_cpus: Optional[float] = None) -> int:
    """Runs at once on the local machine (or the plan's ``num_cpus``), capped by ``max_concurrent``."""
    import os

    r = plan.resources
    if r.max_concurrent and not (num_cpus or r.num_cpus):
        return r.max_concurrent  # a cluster plan: assume the cluster is sized for it
    cpus = num_cpus or r.num_cpus or os.cpu_count() or 1
    per_run = r.cpus_per_worker * r.workers
    n = max(1, int(cpus // per_run))
    return min(n, r.max_concurrent) if r.max_concurrent else n


def plan_summary(path: str | Path) -> dict[str, Any]:
    """The resolved runs of the plan at ``path`` and its totals; raises PlanError/ResourceError."""
    plan, source = load_plan(path)
    expansion = expand(plan, source)
    return summarize(expansion)


def summarize(expansion: Expansion) -> dict[str, Any]:
    plan = expansion.plan
    rows = [run_row(r, plan) for r in expansion.runs]
    serial = sum(r["est_seconds"] for r in rows)
    k = concurrency(plan)
    return {
        "sweep": plan.name,
        "conventions": {"params": plan.conventions.params, "flops": plan.conventions.flops},
        "precision": {"resolved": plan.train.precision, "reason": expansion.precision_reason},
        "runs": rows,
        "notes": expansion.notes,
        "totals": {
            "runs": len(rows),
            "C": sum(r["C"] for r in rows),
            "tokens": sum(r["D"] for r in rows),
            "max_memory_gib": max((r["memory_gib"] for r in rows), default=0.0),
            "est_seconds_serial": serial,
            "concurrent_runs": k,
            "est_seconds_wall": serial / k,
            "throughput_flops_per_worker": throughput(plan) if plan.simulate is None else None,
        },
    }


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f}s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.1f}m"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86400:.1f}d"


def render_table(summary: dict[str, Any]) -> Any:
    """A rich Table of the summary (the CLI prints it)."""
    from rich.table import Table

    t = summary["totals"]
    table = Table(
        title=f"sweep {summary['sweep']}: {t['runs']} runs "
        f"(N: {summary['conventions']['params']}, C: {summary['conventions']['flops']})",
        caption=(
            f"total C {t['C']:.3g} FLOPs, {t['tokens']:.3g} tokens, max memory {t['max_memory_gib']:.3g} GiB/worker; "
            f"est. {_duration(t['est_seconds_serial'])} serial, ~{_duration(t['est_seconds_wall'])} with "
            f"{t['concurrent_runs']} at once "
            + (f"(at {t['throughput_flops_per_worker']:.2g} FLOP/s per worker); "
               if t["throughput_flops_per_worker"] is not None else "(simulated runs); ")
            + f"precision {summary['precision']['resolved']} ({summary['precision']['reason']})"
        ),
    )
    for col in ("key", "N", "shape", "D", "C", "D/N", "epochs", "lr", "batch", "mem GiB", "strategy", "est."):
        table.add_column(col, justify="left" if col in ("key", "shape", "strategy") else "right")
    for r in summary["runs"]:
        table.add_row(
            r["key"],
            f"{r['N']:,}",
            r["shape"],
            f"{r['D']:.3g}",
            f"{r['C']:.3g}",
            f"{r['tokens_per_param']:.3g}",
            "-" if r["epochs"] is None else f"{r['epochs']:.2f}",
            f"{r['lr']:.3g}",
            f"{r['batch_tokens']:,}",
            f"{r['memory_gib']:.3g}",
            f"{r['strategy']}" + (f" x{r['workers']}" if r["workers"] > 1 else ""),
            _duration(r["est_seconds"]),
        )
    return table


def to_json(summary: dict[str, Any]) -> str:
    return json.dumps(summary, indent=2)
