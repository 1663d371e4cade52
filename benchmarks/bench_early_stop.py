"""Early stopping in an adaptive sweep against the same sweep without it (simulated runs).

The runs' eval losses follow a known curve law in their own learning-rate schedule (Luo et al.'s
multi-power law of their 25M model, plus A / N^alpha of a Chinchilla term for the size, with
log-normal noise; `scaling.trainer.simulate`). For each of ``--seeds`` noise seeds the same adaptive
plan runs twice in-process, through the loop a sweep runs (`scaling.orchestrator.adaptive.run_adaptive`:
the same refits, ranking and decisions; the training step calls the trainer's entry point, the
simulated trainer, instead of scheduling Ray tasks) against real SQLite databases: once with
``adaptive.early_stop`` (``--tolerance``, ``--after``, ``--every``) and once without.

Prints per seed and in summary: the FLOPs each sweep trained (a stopped run counts up to its stopped
step) and the share early stopping saved; approach 2's N* at the target budget with its 95% interval
from each sweep's last refit, and their ratio; how many runs stopped, the error of their predicted
finals against the simulator's noiseless final loss, and how often the prediction's interval covered it (with
its binomial SE; the stopped runs of one seed share their references, so their misses are not independent).

    python benchmarks/bench_early_stop.py [--seeds 3] [--first 0] [--tolerance 0.02] [--after 0.5] [--every 0.1]
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from scaling import vocab  # noqa: E402
from scaling.db import Store, connect  # noqa: E402
from scaling.orchestrator.adaptive import run_adaptive  # noqa: E402
from scaling.orchestrator.expand import Expansion, expand  # noqa: E402
from scaling.orchestrator.plan import Plan  # noqa: E402
from scaling.orchestrator.status import early_savings  # noqa: E402
from scaling.orchestrator.sweep import register  # noqa: E402
from bench_adaptive import train_here  # noqa: E402 - the same training step without Ray

CURVE = {"form": "multi-power", "L0": 1.9, "A": 0.5247, "alpha": 0.5079, "B": 363.79, "C": 2.0656,
         "beta": 0.5828, "gamma": 0.6414, "evals": 40}
LAW = {"E": 0.0, "A": 480.0, "B": 1e-6, "alpha": 0.35, "beta": 1.0}
GRID_MODELS = np.geomspace(2e7, 6e8, 6).tolist()
GRID_BUDGETS = [1e17, 3e17, 1e18]
NOISE = 0.003


def add_rule_arguments(ap: argparse.ArgumentParser) -> None:
    """The early-stopping rule's options (``adaptive.early_stop``), shared with bench_early_stop_real.py."""
    ap.add_argument("--tolerance", type=float, default=0.05)
    ap.add_argument("--after", type=float, default=0.5)
    ap.add_argument("--every", type=float, default=0.1)


def plan_for(name: str, seed: int, args: argparse.Namespace, early: bool) -> Plan:
    adaptive: dict[str, Any] = {"target": {"law": "approach2", "at_compute": args.at, "interval_ratio": args.ratio},
                                "max_compute": args.max_compute, "batch": 5, "max_rounds": args.rounds,
                                "n_bootstrap": args.bootstrap}
    if early:
        adaptive["early_stop"] = {"tolerance": args.tolerance, "after": args.after, "every": args.every}
    return Plan.from_dict({
        "name": name, "runs_dir": "runs",
        "simulate": {"law": LAW, "noise": NOISE, "seed": seed, "curve": CURVE},
        "train": {"batch_tokens": 1024 * 1024, "optimizer": {"lr": 3e-3},
                  "schedule": {"kind": "cosine", "warmup_steps": 10, "min_lr_ratio": 0.1}},
        "adaptive": adaptive,
        "grid": [{"models": GRID_MODELS, "compute": GRID_BUDGETS}],
    })


def one_sweep(plan: Plan, url: str) -> dict[str, Any]:
    store = Store(url)
    grid = expand(plan, resolve=False).runs
    reg = lambda runs: register(store, plan, Expansion(plan, runs))  # noqa: E731
    reg(grid)
    try:
        out = run_adaptive(plan, grid, url=url, store=store, register=reg,
                           train=lambda runs: train_here(store, url, plan.name, runs), echo=lambda s: None)
    finally:
        store.close()
    with connect(url) as res:
        runs = res.runs(sweep=plan.name, spec=False)
        events = res.events(sweep=plan.name, kinds=[vocab.SIMULATED, vocab.STOPPED_EARLY])
    truth = {k: d["expected_final_loss"] for k, kind, d in zip(events["run_key"], events["kind"], events["detail"])
             if kind == vocab.SIMULATED}
    stops = [(k, d) for k, kind, d in zip(events["run_key"], events["kind"], events["detail"])
             if kind == vocab.STOPPED_EARLY]
    errors = [d["loss"] - truth[k] for k, d in stops]
    covered = [d["lo"] <= truth[k] <= d["hi"] for k, d in stops]
    fit = out.decisions[-1].fit if out.decisions else {}
    return {"status": out.status, "runs": len(runs), "stopped": len(stops),
            "planned": float(runs["C"].sum()), "trained": float(runs["C"].sum() - early_savings(runs).sum()),
            "N": fit.get("value"), "lo": fit.get("lo"), "hi": fit.get("hi"), "errors": errors, "covered": covered}


def _iv(r: dict[str, Any]) -> str:
    if r["N"] is None or not math.isfinite(r["N"]):
        return "no N*"
    ends = f" [{r['lo']:.3g}, {r['hi']:.3g}]" if r["lo"] is not None else " (no interval)"
    return f"{r['N']:.3g}{ends}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--first", type=int, default=0, help="the first noise seed")
    add_rule_arguments(ap)
    ap.add_argument("--at", type=float, default=1e19)
    ap.add_argument("--ratio", type=float, default=2.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-compute", type=float, default=3e19)
    ap.add_argument("--bootstrap", type=int, default=100)
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in range(args.first, args.first + args.seeds):
            t0 = time.perf_counter()
            out = {}
            for early in (False, True):
                url = f"sqlite:///{Path(tmp) / f's{seed}-{int(early)}.sqlite'}"
                out[early] = one_sweep(plan_for(f"es{seed}", seed, args, early), url)
            base, es = out[False], out[True]
            saved = 1.0 - es["trained"] / base["trained"]
            ratio = es["N"] / base["N"] if es["N"] and base["N"] else math.nan
            err = np.abs(es["errors"]) if es["errors"] else np.array([math.nan])
            print(f"seed {seed}: without: {base['runs']} runs, {base['trained']:.3g} FLOPs, N* {_iv(base)} ({base['status']}); "
                  f"with: {es['runs']} runs ({es['stopped']} stopped early), {es['trained']:.3g} FLOPs, N* {_iv(es)} "
                  f"({es['status']}); saved {100 * saved:.0f}% of the FLOPs, N* ratio {ratio:.3f}; predicted finals: "
                  f"mean |error| {np.mean(err):.4f}, max {np.max(err):.4f}, interval covered the truth in "
                  f"{sum(es['covered'])}/{len(es['covered'])} ({time.perf_counter() - t0:.0f} s)", flush=True)
            rows.append((saved, ratio, es["errors"], es["covered"], base["trained"], es["trained"]))
    saved = np.array([r[0] for r in rows])
    ratios = np.array([r[1] for r in rows])
    errors = np.abs(np.concatenate([r[2] for r in rows])) if any(r[2] for r in rows) else np.array([math.nan])
    covered = [c for r in rows for c in r[3]]
    share = float(np.mean(covered)) if covered else math.nan
    print(f"summary over {len(rows)} seeds (tolerance {args.tolerance:g}, after {args.after:g}, every {args.every:g}): "
          f"FLOPs trained with / without early stopping: {sum(r[5] for r in rows) / sum(r[4] for r in rows):.3f} "
          f"(median saving {100 * np.median(saved):.0f}%); N* with / without: median {np.nanmedian(ratios):.3f}, "
          f"range [{np.nanmin(ratios):.3f}, {np.nanmax(ratios):.3f}]; predicted finals: {errors.size} runs, mean "
          f"|error| {np.nanmean(errors):.4f}, intervals covering the truth {sum(covered)}/{len(covered)}"
          + (f" = {100 * share:.1f}% (binomial SE {100 * np.sqrt(share * (1 - share) / len(covered)):.1f}%)"
             if covered else ""))


if __name__ == "__main__":
    main()
