"""Adaptive sweeps against fixed IsoFLOP grids, over random Chinchilla laws (simulated runs).

For each of ``--laws`` random laws (`scaling.fitting.loss.synthetic.draw_truth`: exponents 0.25-0.45,
E 1.5-2.0, A and B within a factor 2 of Epoch AI's), an adaptive plan is run in-process through
the very loop a sweep runs (`scaling.orchestrator.adaptive.run_adaptive`: the same refits,
ranking and decisions; only the training step calls the simulated trainer here instead of
scheduling Ray tasks) against a real SQLite database. Its grid is 9 sizes (1e7-3e9
parameters) at 1e18, 3e18 and 1e19 FLOPs (``--grid-budgets``); its target is approach 2's N* at ``--at`` FLOPs
within a factor ``--ratio`` (``--interval``: the bootstrap interval, or the reported one that is
widened beyond the data by the backtest's model error).

The baseline is a fixed 5-slice grid: budgets log-spaced from the adaptive grid's smallest budget
(both designs start from the same cheapest slice) to C_top, 7 sizes per budget
spanning +-1.5 in ln N around a prior guess of N* (20 tokens per parameter, as one would plan
without a fit), fitted the same way. C_top climbs a ladder of factors of 2 until the fixed grid's
interval (same law, same kind of interval, no unreliable note) is at most as wide as the
adaptive sweep's final one; its cost is the compute of that grid. An "oracle" variant centres
each fixed slice on the true N* (5 sizes, +-1 in ln N: the adaptive slices' design), the most a
fixed grid could do with foreknowledge. Whether each grid's interval, once narrow enough, covers the
true N* is printed too (a grid that stops at its first narrow interval may stop on a wrong one).

Prints, per law and in summary: the adaptive sweep's compute and stop reason, the ratio of its
compute to the fixed grid's (goal: median <= 1/2), and the coverage of its final interval on
the true N* (goal >= 90%).

    python benchmarks/bench_adaptive.py [--laws 50] [--ratio 2.0] [--at 1e22] [--interval bootstrap]

On a busy machine, shard the laws over processes and merge their rows afterwards:

    python benchmarks/bench_adaptive.py --shard 0/3 --rows r0.json &  (... 1/3, 2/3)
    python benchmarks/bench_adaptive.py --merge r0.json r1.json r2.json
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
from scaling.db import Store  # noqa: E402
from scaling.fitting.sweep_fit import fit_data  # noqa: E402
from scaling.fitting.core.measurements import prepare  # noqa: E402
from scaling.fitting.loss.synthetic import chinchilla_optimal_N, draw_truth  # noqa: E402
from scaling.orchestrator.adaptive import measure, run_adaptive  # noqa: E402
from scaling.orchestrator.expand import Expansion, expand  # noqa: E402
from scaling.orchestrator.plan import Plan  # noqa: E402
from scaling.orchestrator.sweep import register  # noqa: E402
from scaling.trainer import train  # noqa: E402
from scaling.trainer.simulate import simulate  # noqa: E402

#: The adaptive sweep's first round: 9 sizes at the three smallest budgets (the fixed grids start at the same lowest one).
GRID_BUDGETS = [1e18, 3e18, 1e19]
GRID_MODELS = np.geomspace(1e7, 3e9, 9).tolist()
NOISE = 0.005
BATCH_TOKENS = 4 * 1024 * 1024
#: A fixed grid's ladder stops past this multiple of the adaptive sweep's compute (the ratio is then an upper bound).
CAP_FACTOR = 4.0


def plan_for(name: str, law: dict[str, float], seed: int, args: argparse.Namespace, runs_dir: str) -> Plan:
    return Plan.from_dict({
        "name": name,
        "runs_dir": runs_dir,
        "simulate": {"law": law, "noise": NOISE, "seed": seed},
        "train": {"batch_tokens": BATCH_TOKENS},
        "adaptive": {"target": {"law": "approach2", "at_compute": args.at, "interval_ratio": args.ratio,
                                "interval": args.interval},
                     "max_compute": args.max_compute, "batch": 5, "n_bootstrap": args.bootstrap},
        "grid": [{"models": GRID_MODELS, "compute": args.grid_budgets}],
    })


def train_here(store: Store, url: str, sweep: str, runs: list[Any]) -> None:
    """The training step without Ray: claim, simulate, finish each run not completed yet."""
    for r in runs:
        attempt = store.claim(r.key, "bench:0", sweep=sweep)
        if attempt is None:
            continue
        res = train(r.spec, url, "", attempt=attempt, sweep=sweep)
        store.finish(r.key, vocab.COMPLETED, final_train_loss=res.final_train_loss,
                     final_eval_loss=res.final_eval_loss, sweep=sweep)


def run_adaptive_here(plan: Plan, url: str) -> Any:
    store = Store(url)
    grid = expand(plan).runs
    reg = lambda runs: register(store, plan, Expansion(plan, runs))  # noqa: E731
    reg(grid)
    try:
        return run_adaptive(plan, grid, url=url, store=store, register=reg,
                            train=lambda runs: train_here(store, url, plan.name, runs), echo=lambda s: None)
    finally:
        store.close()


def fixed_grid(plan: Plan, c_top: float, law: dict[str, float], oracle: bool) -> tuple[float, dict[str, Any] | None]:
    """(cost, what the fit says about the target) of a fixed 5-slice grid up to ``c_top``."""
    blocks = []
    for C in np.geomspace(lowest_budget(plan), c_top, 5):
        if oracle:
            sizes = float(chinchilla_optimal_N(C, law)) * np.exp(np.linspace(-1.0, 1.0, 5))
        else:
            sizes = math.sqrt(C / 120.0) * np.exp(np.linspace(-1.5, 1.5, 7))
        blocks.append({"models": sizes.tolist(), "compute": [float(C)]})
    grid_plan = Plan.from_dict({**plan.model_dump(mode="json", exclude={"adaptive"}), "grid": blocks})
    runs = expand(grid_plan).runs
    rows = [(r.spec.n_params, r.spec.tokens, r.spec.flops, simulate(r.spec, None).final_eval_loss) for r in runs]
    cost = float(sum(r[2] for r in rows))
    import pandas as pd

    try:
        fitted = fit_data(prepare(pd.DataFrame(rows, columns=["N", "D", "C", "loss"])), "approach2",
                          n_bootstrap=plan.adaptive.n_bootstrap, seed=0).laws["approach2"]
    except Exception:  # noqa: BLE001 - a grid approach 2 cannot fit has no interval
        return cost, None
    return cost, measure(fitted, plan.adaptive.target)


def lowest_budget(plan: Plan) -> float:
    """The adaptive grid's smallest budget: every fixed grid starts there too."""
    return float(min(C for block in plan.grid for C in block.compute or ()))


def cheapest_fixed(plan: Plan, law: dict[str, float], ratio: float, oracle: bool, cap: float,
                   truth: float) -> tuple[float | None, bool, bool | None]:
    """(compute of the cheapest fixed grid on the ladder whose interval is at most ``ratio`` wide, capped).

    The ladder stops once a grid costs more than ``cap`` FLOPs (then the answer is only "more
    than cap": capped is True) or C_top passes the target's at_compute (None, not capped).
    """
    c_top = 4 * lowest_budget(plan)
    while c_top <= plan.adaptive.target.at_compute:
        cost, fit = fixed_grid(plan, c_top, law, oracle)
        if fit is not None and fit["reliable"] and fit["ratio"] is not None and fit["ratio"] <= ratio:
            return cost, False, fit["lo"] <= truth <= fit["hi"]
        if cost > cap:
            return cap, True, None
        c_top *= 2
    return None, False, None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--laws", type=int, default=50)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--at", type=float, default=1e22, help="at_compute of the target")
    ap.add_argument("--ratio", type=float, default=2.0, help="interval_ratio of the target")
    ap.add_argument("--interval", choices=("bootstrap", "reported"), default="bootstrap")
    ap.add_argument("--max-compute", type=float, default=1e23)
    ap.add_argument("--bootstrap", type=int, default=100)
    ap.add_argument("--grid-budgets", type=float, nargs="+", default=GRID_BUDGETS,
                    help="budgets of the adaptive sweep's first round (9 sizes each); the fixed grids start at the smallest")
    ap.add_argument("--db", default=None, help="SQLite file (default: a temporary one)")
    ap.add_argument("--shard", default="0/1", help="k/n: run the laws whose index is k modulo n")
    ap.add_argument("--rows", default=None, help="write the per-law rows to this JSON file")
    ap.add_argument("--merge", nargs="+", default=None, help="summarise rows written by --rows")
    args = ap.parse_args()
    if args.merge:
        import json

        rows = sorted((r for f in args.merge for r in json.loads(Path(f).read_text())), key=lambda r: r["law"])
        summarise(rows, args, None)
        return
    shard, shards = (int(x) for x in args.shard.split("/"))

    tmp = tempfile.mkdtemp(prefix="bench_adaptive_")
    url = f"sqlite:///{args.db or Path(tmp) / 'bench.db'}"
    rng = np.random.default_rng(args.seed)
    rows = []
    t0 = time.time()
    print(f"{'law':>4} {'stop':>7} {'rounds':>6} {'adaptive C':>11} {'ratio':>6} {'covers':>6} "
          f"{'fixed C':>9} {'adapt/fixed':>11} {'oracle C':>9} {'adapt/oracle':>12}")
    for i in range(args.laws):
        law = draw_truth(rng)
        if i % shards != shard:
            continue
        plan = plan_for(f"law{i:03d}", law, args.seed + i, args, tmp)
        out = run_adaptive_here(plan, url)
        fit = out.decisions[-1].fit
        truth = float(chinchilla_optimal_N(args.at, law))
        covers = fit.get("lo") is not None and fit["lo"] <= truth <= fit["hi"]
        row = {"law": i, "status": out.status, "rounds": len(out.decisions) - 1, "spent": out.spent,
               "ratio": fit.get("ratio"), "covers": covers, "fixed": None, "oracle": None}
        if out.status == "met":
            cap = CAP_FACTOR * out.spent
            row["fixed"], row["fixed_capped"], row["fixed_covers"] = cheapest_fixed(plan, law, fit["ratio"], False, cap, truth)
            row["oracle"], row["oracle_capped"], row["oracle_covers"] = cheapest_fixed(plan, law, fit["ratio"], True, cap, truth)
        rows.append(row)
        f = lambda v: f"{v:.3g}" if v is not None else "-"  # noqa: E731
        q = lambda a, b, capped=False: (("<" if capped else "") + f"{a / b:.3g}") if a is not None and b else "-"  # noqa: E731
        print(f"{i:>4} {row['status']:>7} {row['rounds']:>6} {row['spent']:>11.3g} {f(row['ratio']):>6} "
              f"{str(covers):>6} {f(row['fixed']):>9} {q(row['spent'], row['fixed'], row.get('fixed_capped')):>11} "
              f"{f(row['oracle']):>9} {q(row['spent'], row['oracle'], row.get('oracle_capped')):>12}", flush=True)
        if args.rows:
            import json

            Path(args.rows).write_text(json.dumps(rows))
    summarise(rows, args, time.time() - t0)


def summarise(rows: list[dict[str, Any]], args: argparse.Namespace, seconds: float | None) -> None:
    met = [r for r in rows if r["status"] == "met"]
    took = f" in {seconds:.0f} s" if seconds is not None else " (merged)"
    print(f"\n{len(rows)} laws{took}; target: approach 2's N* at {args.at:.3g} FLOPs within a factor "
          f"{args.ratio:g} ({args.interval} interval), budget {args.max_compute:.3g} FLOPs")
    print("stopped: " + ", ".join(f"{s} {sum(r['status'] == s for r in rows)}" for s in sorted({r['status'] for r in rows})))
    for key, label in (("fixed", "prior-centred fixed grid (7 sizes, +-1.5)"), ("oracle", "oracle-centred fixed grid (5 sizes, +-1)")):
        pairs = [r["spent"] / r[key] for r in met if r[key]]
        capped = sum(1 for r in met if r[key] and r.get(f"{key}_capped"))
        never = sum(1 for r in met if not r[key])
        if pairs:
            print(f"compute, adaptive / {label}: median {np.median(pairs):.3g}, geometric mean "
                  f"{math.exp(np.mean(np.log(pairs))):.3g}, <= 1/2 in {sum(p <= 0.5 for p in pairs)}/{len(pairs)} laws "
                  f"(goal: median <= 0.5; {capped} of them upper bounds: the fixed grid cost more than "
                  f"{CAP_FACTOR:g}x the adaptive sweep without reaching the interval); the fixed grid never reached "
                  f"the interval with C_top up to {args.at:.3g} FLOPs in {never} more")
            reached = [r[f"{key}_covers"] for r in met if r.get(f"{key}_covers") is not None]
            if reached:
                print(f"  that grid's interval covered the true N* in {sum(reached)}/{len(reached)} laws where it "
                      f"reached the width")
        else:
            print(f"compute, adaptive / {label}: no comparable law ({never} never reached the interval)")
    if met:
        print(f"coverage of the final interval on the true N*: {sum(r['covers'] for r in met)}/{len(met)} = "
              f"{sum(r['covers'] for r in met) / len(met):.0%} of the sweeps that met the target (goal >= 90%)")
    print(f"coverage over every sweep: {sum(r['covers'] for r in rows)}/{len(rows)}")


if __name__ == "__main__":
    main()
