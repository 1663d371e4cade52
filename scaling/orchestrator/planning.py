"""`scaling plan`: the report of an expanded plan (`scaling.orchestrator.expand`): its runs with
their layout, memory and estimated time, as rows, a table and ``--explain`` lines.

Nothing is trained or written. Each run's layout (dp x tp x pp, ZeRO stage, micro-batches,
pipeline schedule), its memory per rank and its step time (compute, pipeline bubble,
communication) come from `scaling.layout`, which the expansion calls; the time is the real FLOPs
of a step (attention and embeddings counted) at a throughput per worker that the plan may set
(``resources.throughput_flops``), else a share of the CPU's probed matmul rate in the runs'
resolved precision, or a GPU default for that precision.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Optional

from scaling import fmt
from scaling.accounting import GIB, MemoryEstimate, Shape
from scaling.errors import PlanError
from scaling.orchestrator.expand import Expansion, PlannedRun, expand
from scaling.orchestrator.hparam_groups import group_rows
from scaling.orchestrator.plan import Plan, load_plan
from scaling.vocab import HPARAM_GROUP_TAG
from scaling.trainer.evaluation.task_cost import cost_note, cost_row
from scaling.trainer.resolve import overheads, worker_gpus, worker_rate


def throughput(plan: Plan, precision: Optional[str] = None) -> float:
    """FLOP/s one worker achieves in ``precision`` (default: the expanded plan's resolved one):
    the plan's figure, else a share of the probed CPU peak (cached) or a GPU default."""
    r = plan.resources
    return worker_rate(precision or plan.train.precision, plan.train.threads, worker_gpus(r.device, r.gpus_per_worker),
                       r.host())


def estimated_seconds(run: PlannedRun, plan: Plan) -> float:
    """Wall time of one run: its steps times the chosen layout's step time (compute, bubble,
    communication and the fixed per-step cost); a cooldown branch trains only the steps after
    its branch point; a simulated run takes its ``pace`` per step (none: a few rows in milliseconds)."""
    if run.spec.simulate is not None:
        return run.spec.steps * run.spec.simulate.pace
    steps = run.spec.steps - (run.spec.branch.from_step if run.spec.branch else 0)
    if run.layout is not None:
        return steps * run.layout.best.step_s
    shape = run.spec.shape
    real_flops = shape.flops_per_token("6N_attention", "total") * steps * run.spec.batch_tokens
    per_step = overheads(worker_gpus(plan.resources.device, plan.resources.gpus_per_worker))[0]
    rate = throughput(plan, run.spec.precision)
    return steps * per_step + real_flops / (rate * run.spec.execution.workers)


def shape_label(shape: Shape) -> str:
    """``LxD/Hh`` and what the family adds (``Family.label``: a llama shape its kv heads when fewer
    and its SwiGLU width, an MoE its experts); a μP shape its base width."""
    label = f"{shape.n_layer}x{shape.d_model}/{shape.n_head}h"
    mup = f" mup base {shape.base_width}" if shape.parametrization == "mup" else ""
    return f"{label}{shape.family_spec.label(shape)}{mup}"


def corpus_tokens(run: PlannedRun) -> Optional[int]:
    """Tokens in the training corpus, when the data has been resolved."""
    return run.spec.data.unique_tokens


def run_row(run: PlannedRun, plan: Plan) -> dict[str, Any]:
    spec = run.spec
    shape = spec.shape
    corpus = corpus_tokens(run)
    row = {
        "key": spec.key,
        "N": spec.n_params,
        "N_total": shape.params_total,
        "N_active": shape.params_active,  # what one token uses (an MoE's router, top-k and shared experts)
        "N_non_embedding": shape.params_non_embedding,
        "N_embedding": shape.params_embedding,
        "family": shape.family,
        "shape": shape_label(shape),
        "n_layer": shape.n_layer,
        "d_model": shape.d_model,
        "n_head": shape.n_head,
        "D": spec.trained_tokens,
        "C": spec.flops,
        "C_own": spec.flops * (1 - spec.trunk_tokens / spec.trained_tokens),  # what it trains itself
        "budget": run.budget,
        "tokens_per_param": spec.trained_tokens / spec.n_params,
        "epochs": (spec.trained_tokens / corpus) if corpus else None,
        "lr": spec.optimizer.lr,
        "beta2": spec.optimizer.beta2,
        "hparam_group": spec.tags.get(HPARAM_GROUP_TAG),  # the runs of one point of an lr / batch sweep
        "batch_tokens": spec.batch_tokens,
        "steps": spec.steps,
        "seed": spec.seed,
        "workers": spec.execution.workers,
        "memory_gib": run.memory_gib,
        "strategy": run.strategy,
        "precision": spec.precision,
        "est_seconds": estimated_seconds(run, plan),
    }
    row.update(cost_row(spec, row["est_seconds"]))  # scoring its tasks (scaling.trainer.evaluation.task_cost)
    if run.layout is not None:
        best, steps = run.layout.best, spec.steps
        lay = best.layout
        row.update({
            "layout": best.label(),
            "dp": lay.dp, "tp": lay.tp, "pp": lay.pp, "ep": lay.ep,
            "pp_schedule": best.schedule if lay.pp > 1 else None,
            "micro_batch": lay.micro_batch, "micro_batches": lay.micro_batches,
            "compute_seconds": steps * best.compute_s,
            "comm_seconds": steps * best.comm_total_s,
            "comm_seconds_by_group": {g: steps * t for g, t in best.comm_s.items()},
            "bubble_seconds": steps * best.bubble_s,
            "step_seconds": best.step_s,
            "layouts_considered": run.layout.considered,
            "reason": "; ".join(r.short for r in run.layout.reasons),
            "reasons": [r.long for r in run.layout.reasons],
            "layout_summary": run.layout.summary,
            "memory_parts_gib": memory_parts(best.memory),
        })
    return row


def memory_parts(est: MemoryEstimate) -> dict[str, float]:
    """A :class:`~scaling.accounting.MemoryEstimate`'s parts in GiB, as ``--explain`` lists them."""
    parts = {"weights": est.weights_bytes, "gradients": est.gradients_bytes, "optimizer": est.optimizer_bytes,
             "activations": est.activations_bytes, "buffers": est.buffers_bytes, "margin": est.margin_bytes}
    return {name: value / GIB for name, value in parts.items()}


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


def plan_summary(path: str | Path, db: Optional[str] = None, refresh_transfer: bool = False) -> dict[str, Any]:
    """The resolved runs of the plan at ``path`` and its totals; raises PlanError/ResourceError.
    ``db``: the database a ``{fitted: SWEEP}`` rule reads its sweep from (``--db``; see :func:`expand`)."""
    plan, source = load_plan(path)
    expansion = expand(plan, source, db=db, refresh_transfer=refresh_transfer)
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
        "groups": group_rows(rows),  # each hyperparameter group's runs, values and cost
        "notes": (expansion.notes + attention_notes(expansion) + _adaptive_note(plan, sum(r["C_own"] for r in rows))
                  + cost_note(plan.evals, rows)),
        "totals": {
            "runs": len(rows),
            "C": sum(r["C_own"] for r in rows),  # compute trained, a shared trunk counted once
            "tokens": sum(r["D"] * r["C_own"] / r["C"] for r in rows),
            "max_memory_gib": max((r["memory_gib"] for r in rows), default=0.0),
            "est_seconds_serial": serial,
            "concurrent_runs": k,
            "est_seconds_wall": serial / k,
            "throughput_flops_per_worker": throughput(plan) if plan.simulate is None else None,
            "task_eval_flops": sum(r["task_eval_flops"] for r in rows),  # scoring the plan's tasks
        },
    }


def attention_notes(expansion: Expansion) -> list[str]:
    """One line per distinct attention kernel choice the plan's runs get on this machine, and why
    (`scaling.trainer.families.attention`); nothing for a simulated plan, whose runs train no model."""
    if expansion.plan.simulate is not None or not expansion.runs:
        return []
    from scaling.trainer.families.attention import planned_attention
    from scaling.trainer.resolve import device_kind

    cases: dict[tuple[int, str, str, bool], int] = {}
    for run in expansion.runs:
        spec = run.spec
        case = (spec.shape.d_model // spec.shape.n_head, device_kind(spec.execution), spec.precision,
                spec.execution.compile)
        cases[case] = cases.get(case, 0) + 1
    return [f"attention for {runs} run(s) (head dim {head_dim}, {device}, {precision}"
            f"{', compiled' if compiled else ''}): " + planned_attention(head_dim, device, precision, compiled)
            for (head_dim, device, precision, compiled), runs in sorted(cases.items())]


def _adaptive_note(plan: Plan, grid_flops: float) -> list[str]:
    """What an adaptive plan may spend beyond the runs listed (its grid)."""
    a = plan.adaptive
    if a is None:
        return []
    return [f"adaptive: these are the grid's runs ({fmt.flops(grid_flops)} FLOPs); the sweep then adds IsoFLOP slices "
            f"until N* at {fmt.flops(a.target.at_compute)} FLOPs is known within a factor {a.target.interval_ratio:g}, "
            f"spending at most max_compute = {fmt.flops(a.max_compute)} FLOPs in all (at most {a.max_rounds} slices)"]


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f}s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.1f}m"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86400:.1f}d"


def render_table(summary: dict[str, Any]) -> Any:
    """A rich Table of the summary (the CLI prints it): one row per run, its layout and times."""
    from rich.table import Table

    t = summary["totals"]
    runs = summary["runs"]
    listed = ""
    if len(runs) > MAX_TABLE_RUNS:
        listed = (f"listed: the first and last {MAX_TABLE_RUNS // 2} of {len(runs):,} runs ({_ranges(runs)}; "
                  "`--format json` lists every run); ")
    table = Table(
        title=f"sweep {summary['sweep']}: {t['runs']} runs "
        f"(N: {summary['conventions']['params']}, C: {summary['conventions']['flops']})",
        caption=(
            listed + f"total C {fmt.flops(t['C'])} FLOPs, {fmt.count(t['tokens'])} tokens, max memory {t['max_memory_gib']:.3g} GiB/worker; "
            f"est. {_duration(t['est_seconds_serial'])} serial, ~{_duration(t['est_seconds_wall'])} with "
            f"{t['concurrent_runs']} at once "
            + (f"(at {t['throughput_flops_per_worker']:.2g} FLOP/s per worker; "
               "communication not overlapped with compute); "
               if t["throughput_flops_per_worker"] is not None else "(simulated runs); ")
            + f"precision {summary['precision']['resolved']} ({summary['precision']['reason']}); "
            "`scaling plan FILE --explain KEY` says why a layout was chosen"
        ),
    )
    columns = ("key", "N", "N total", "N active", "shape", "D", "C", "D/N", "epochs", "lr", "batch", "layout", "GiB/rank",
               "compute", "comm", "bubble", "est.", "why")
    for col in columns:
        table.add_column(col, justify="left" if col in ("key", "shape", "layout", "why") else "right",
                         overflow="fold", max_width=44 if col == "why" else None)
    shown, hidden = _ends(runs, MAX_TABLE_RUNS)
    for i, r in enumerate(shown):
        if hidden and i == len(shown) // 2:
            table.add_row("…", *[""] * (len(columns) - 2), f"{hidden:,} runs not listed")
        layout = r.get("layout") or (f"{r['strategy']}" + (f" x{r['workers']}" if r["workers"] > 1 else ""))
        times = [_duration(r[k]) if k in r else "-" for k in ("compute_seconds", "comm_seconds", "bubble_seconds")]
        table.add_row(
            r["key"],
            fmt.count(r["N"]),
            f"{r['N_total']:,}",  # exact: the counts a published shape is checked against
            f"{r['N_active']:,}",
            r["shape"],
            fmt.count(r["D"]),
            fmt.flops(r["C"]),
            f"{r['tokens_per_param']:.3g}",
            "-" if r["epochs"] is None else f"{r['epochs']:.2f}",
            f"{r['lr']:.6g}",
            fmt.count(r["batch_tokens"]),
            layout,
            f"{r['memory_gib']:.3g}",
            *times,
            _duration(r["est_seconds"]),
            r.get("reason") or "-",
        )
    return table


def render_groups(summary: dict[str, Any]) -> Any:
    """A rich Table of the plan's hyperparameter groups (None without any): each group's runs, the
    values it sweeps, its compute and estimated time (the totals above count every run)."""
    from rich.table import Table

    groups = summary["groups"]
    if not groups:
        return None
    runs = sum(g["runs"] for g in groups)
    plural = "s" if len(groups) > 1 else ""
    cost = f"{fmt.flops(sum(g['C'] for g in groups))} FLOPs, est. {_duration(sum(g['est_seconds'] for g in groups))} serial"
    table = Table(title=f"{len(groups)} hyperparameter group{plural}: {runs} runs, {cost}")
    for col in ("group", "runs", "lr", "batch", "beta2", "C", "est."):
        table.add_column(col, justify="left" if col == "group" else "right", overflow="fold")
    shown, hidden = _ends(groups, MAX_TABLE_GROUPS)
    for i, g in enumerate(shown):
        if hidden and i == len(shown) // 2:
            table.add_row(f"… {hidden:,} groups not listed", "", "", "", "", "", "")
        table.add_row(g["group"], str(g["runs"]), _values(g["lr"], lambda v: format(v, ".6g")), _values(g["batch_tokens"], fmt.count),
                      _values(g["beta2"], lambda v: format(v, ".6g")), fmt.flops(g["C"]), _duration(g["est_seconds"]))
    return table


#: Rows of `scaling plan`'s tables beyond which only the first and last half are listed.
MAX_TABLE_RUNS = 60
MAX_TABLE_GROUPS = 40
#: Values of one group's field listed in full up to this many; beyond, the ends and the count.
MAX_LISTED_VALUES = 8


def _ends(rows: list[Any], limit: int) -> tuple[list[Any], int]:
    """The first and last ``limit // 2`` of ``rows`` and how many lie between, or all and 0."""
    if len(rows) <= limit:
        return rows, 0
    half = limit // 2
    return rows[:half] + rows[-half:], len(rows) - 2 * half


def _values(values: list[float], write: Callable[[float], str]) -> str:
    """A group's values of one field, each as ``write`` writes it (lr and beta2 to 6 significant digits:
    values closer are refused; a batch as a count of tokens), all of them or, for a long list, the three
    smallest and largest and the count."""
    text = [write(v) for v in values]
    if len(text) <= MAX_LISTED_VALUES:
        return ", ".join(text)
    return f"{', '.join(text[:3])} … {', '.join(text[-3:])} ({len(text)} values)"


def _ranges(runs: list[dict[str, Any]]) -> str:
    """The span of the runs' N, D, C and lr, for the line that stands in for the runs not listed."""
    def span(key: str, write: Callable[[float], str]) -> str:
        vals = [r[key] for r in runs]
        return f"{key} {write(min(vals))} to {write(max(vals))}"

    return "; ".join((span("N", fmt.count), span("D", fmt.count), span("C", fmt.flops),
                      span("lr", lambda v: format(v, ".6g"))))


def find_run(summary: dict[str, Any], key: str) -> dict[str, Any]:
    """The run whose key is ``key`` or starts with it; PlanError when that names no run or several."""
    rows = [r for r in summary["runs"] if key and r["key"].startswith(key)]
    if not rows:
        raise PlanError(f"--explain {key!r}: no run of sweep {summary['sweep']} has this key or key prefix")
    if len(rows) > 1:
        shown = ", ".join(r["key"] for r in rows[:5]) + (", ..." if len(rows) > 5 else "")
        raise PlanError(f"--explain {key!r}: the prefix is ambiguous: {len(rows)} runs of sweep {summary['sweep']} "
                        f"start with it ({shown}); give more of the key")
    return rows[0]


def explain(summary: dict[str, Any], key: str) -> list[str]:
    """The lines `scaling plan --explain KEY` prints: the run, its layout's times and every reason.

    ``key`` may be a unique prefix of a run key (:func:`find_run`).
    """
    r = find_run(summary, key)
    lines = [f"run {r['key']}: N={fmt.count(r['N'])} ({r['shape']}), D={fmt.count(r['D'])}, "
             f"batch {fmt.count(r['batch_tokens'])} tokens, {r['workers']} worker(s), {r['precision']}",
             f"parameters: {fmt.count(r['N_total'])} in all, {fmt.count(r['N_active'])} active per token, "
             f"{fmt.count(r['N_non_embedding'])} outside the embeddings, "
             f"{fmt.count(r['N_embedding'])} in the embedding matrices"]
    if "layout" not in r:
        return lines + [f"strategy {r['strategy']}, {r['memory_gib']:.3g} GiB per worker"]
    groups = ", ".join(f"{g} {_duration(s)}" for g, s in r["comm_seconds_by_group"].items() if s > 0) or "none"
    lines += [
        f"layout: {r['layout_summary']}",
        f"memory per rank {r['memory_gib']:.3g} GiB ("
        + ", ".join(f"{name} {gib:.3g}" for name, gib in r["memory_parts_gib"].items())
        + f"); over {r['steps']:,} steps: compute {_duration(r['compute_seconds'])}, "
        f"communication {_duration(r['comm_seconds'])} ({groups}), bubble {_duration(r['bubble_seconds'])}, "
        f"total {_duration(r['est_seconds'])}",
    ]
    lines += [f"- {reason}" for reason in r["reasons"]] or ["- the only layout (everything fixed by the plan)"]
    return lines


def to_json(summary: dict[str, Any]) -> str:
    return json.dumps(summary, indent=2)
