"""Trunks on a CPU: each size's cooldowns predicted from its WSD trunk, against the same cooldowns trained as branches.

Two sweeps of real training (gpt2, 2 layers, 4 heads, d_model ``--widths``, the built-in byte corpus, context 64,
512 tokens a batch, fp32, one thread, seed ``--seed``), of the same sizes and token budgets (``--steps``), every run and
trunk warmed up over the same ``--warmup`` steps to ``--lr`` and evaluated every ``--eval-every`` steps:

- **trunks**: ``branches: {tokens: [...], cooldowns: predicted}``: one WSD trunk per size to the largest budget,
  cooling down linearly over its last 20% to a tenth of the peak; the smaller budgets' final losses predicted by
  the curve law across sizes fitted to the trunks' curves (:func:`scaling.fitting.curves.trunks.trunk_predictions`,
  what ``scaling fit`` reads);
- **branches**: ``branches: {tokens: [...]}``: one constant-rate trunk per size and a cooldown branch trained from
  its checkpoint at every budget (the largest budget's branch follows the WSD trunk's rate step for step).

Then each sweep analysed as ``scaling fit`` does (:func:`scaling.fitting.analysis.analyse`, the trunks' predicted
cooldowns entering the laws where the curve law is trusted): per law, N* and D* with their 95% intervals at ten times
the largest run's compute, or the law's flag in place of its numbers, whether the two sweeps' intervals on N*
overlap, and the FLOPs each sweep trained (a branch counted from its branch point).

Printed first: per (size, budget) the trained branch's final eval loss, the predicted one with its 95% interval, their
relative difference and whether the interval holds the trained loss, beside a naive prediction (the WSD trunk's
own eval loss at the budget's last step: what the trunk says without a law, no cooldown); the mean and largest
errors, the coverage and the law's notes; and each WSD trunk's final loss against the largest branch's (the same
rate and data: a check of the set-up). Both sweeps train in this process, one run after another
(``bench_branches.sweep_in_process``: the sweep's own registration, trainer, checkpoints and database).

    PYTHONPATH=. python benchmarks/bench_trunks_cpu.py [--widths 16 32 48 64] [--steps 100 200 400 800] [--seed 0] [--keep DIR [--analyse-only]]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from bench_branches import sweep_in_process

CONTEXT, BATCH, FRACTION, FLOOR = 64, 512, 0.2, 0.1


def write_plan(path: Path, name: str, runs_dir: Path, args: argparse.Namespace, predicted: bool) -> Path:
    branches: dict[str, Any] = {"tokens": [s * BATCH for s in args.steps], "cooldown_fraction": FRACTION,
                                "shape": "linear"}
    if predicted:
        branches["cooldowns"] = "predicted"
    plan = {
        "name": name,
        "runs_dir": str(runs_dir),
        "data": {"source": "builtin"},
        "model": {"vocab_size": 256, "context": CONTEXT},
        "train": {"precision": "fp32", "batch_tokens": BATCH, "optimizer": {"lr": args.lr, "weight_decay": 0.1},
                  "schedule": {"kind": "constant", "warmup_steps": args.warmup, "min_lr_ratio": FLOOR},
                  "eval_interval": args.eval_every, "eval_tokens": args.eval_tokens,
                  "checkpoint_interval": 100_000, "log_interval": 100, "threads": 1},
        "resources": {"workers": 1, "cpus_per_worker": 1, "num_cpus": 1},
        "evals": {"next_line": False},
        "seeds": [args.seed],
        "grid": [{"models": [{"n_layer": 2, "d_model": w, "n_head": 4} for w in args.widths], "branches": branches}],
    }
    path.write_text(yaml.safe_dump(plan, sort_keys=False))
    return path


def finals(url: str, sweep: str, branches_only: bool) -> dict[tuple[float, float], float]:
    """Each run's final eval loss by (N, D); ``branches_only``: the cooldown branches alone (a trained-branch
    sweep's constant trunks are no point)."""
    from scaling import db

    with db.connect(url) as res:
        runs = res.runs(sweep=sweep)
    if branches_only:
        runs = runs[[s.get("branch") is not None for s in runs["spec"]]]
    return {(float(n), float(d)): float(v) for n, d, v in zip(runs["N"], runs["D"], runs["final_loss"])}


def trunk_curves(url: str) -> dict[float, tuple[np.ndarray, np.ndarray]]:
    """Each WSD trunk's eval curve (steps, losses) by N."""
    from scaling import db, vocab

    with db.connect(url) as res:
        runs = res.runs(sweep="trunks")
        m = res.metrics(names=[vocab.EVAL_LOSS], sweep="trunks")
    out = {}
    for key, n in zip(runs["run_key"], runs["N"]):
        rows = m[m["run_key"] == key].sort_values("step")
        out[float(n)] = (rows["step"].to_numpy(float), rows["value"].to_numpy(float))
    return out


def withheld(url: str, law: Any) -> pd.DataFrame:
    """The cooldowns ``law`` predicts for each trunk's smaller budgets, as the fits would have had they trusted it
    (:func:`scaling.fitting.curves.trunks.predict_from_trunks`' rows: N, D, loss, lo, hi)."""
    from scaling import db
    from scaling.batching import steps_for
    from scaling.fitting.curves.trunks import branch_rate, budgets

    with db.connect(url) as res:
        runs = res.runs(sweep="trunks")
    rows = []
    for spec, n in zip(runs["spec"], runs["N"]):
        batch, total = int(spec["batch_tokens"]), steps_for(int(spec["tokens"]), int(spec["batch_tokens"]))
        for D in budgets(spec):
            steps = steps_for(round(D), batch)
            if steps < total:
                iv = law.final_loss(float(n), branch_rate(spec, steps))
                rows.append({"N": float(n), "D": float(steps * batch), "loss": iv.value, "lo": iv.lo, "hi": iv.hi,
                             "interval": iv.bounds_text(4)})
    return pd.DataFrame(rows)


def compare(url: str, n_bootstrap: int) -> None:
    from scaling.fitting.curves.trunks import trunk_predictions

    t = time.perf_counter()
    tp = trunk_predictions(url, "trunks", n_bootstrap, 0)
    print(f"curve law across sizes fitted and bootstrapped ({n_bootstrap} replicates) in {time.perf_counter() - t:.0f} s")
    assert tp is not None
    for note in tp.notes:
        print(f"  note: {note}")
    if tp.law is not None:
        print(tp.law.table())
    rows = tp.rows
    if not len(rows) and tp.law is not None:  # the law's predictions all the same, marked as withheld
        rows = withheld(url, tp.law)
        print("the law's predictions, withheld by the fits (its notes above say why), compared all the same:")
    trained, curves = finals(url, "branches", True), trunk_curves(url)
    errs, naive, hits = [], [], []
    print("N        D          steps  trained  predicted [95%]              rel. error  held  naive (no cooldown)")
    for row in rows.sort_values(["N", "D"]).itertuples():
        truth = trained.get((float(row.N), float(row.D)))
        if truth is None:
            print(f"{row.N:<8.4g} {row.D:<10.4g} no trained branch at this point")
            continue
        if not (np.isfinite(row.loss) and row.loss > 0):
            print(f"{row.N:<8.4g} {row.D:<10.4g} no finite positive loss predicted")
            continue
        steps = int(round(row.D / BATCH))
        s, y = curves[float(row.N)]
        flat = float(np.interp(steps, s, y))
        errs.append((row.loss - truth) / truth)
        naive.append((flat - truth) / truth)
        bounded = row.lo is not None and row.hi is not None and np.isfinite([row.lo, row.hi]).all()
        if bounded:
            hits.append(bool(row.lo <= truth <= row.hi))
        interval = f"[{row.lo:.4f}, {row.hi:.4f}]" if bounded else getattr(row, "interval", "no interval")
        held = ("yes" if hits[-1] else "no") if bounded else "-"
        print(f"{row.N:<8.4g} {row.D:<10.4g} {steps:<6d} {truth:.4f}   {row.loss:.4f} {interval}   "
              f"{100 * errs[-1]:+6.2f}%     {held:<4}  {flat:.4f} ({100 * naive[-1]:+.2f}%)")
    if errs:
        e, z = np.abs(errs), np.abs(naive)
        print(f"predicted vs trained over {len(errs)} point(s): mean |relative error| {100 * e.mean():.2f}% "
              f"(largest {100 * e.max():.2f}%; signed mean {100 * np.mean(errs):+.2f}%); the 95% interval holds the "
              f"trained loss in {sum(hits)}/{len(hits)} that have one; naive (the trunk's loss at that step) {100 * z.mean():.2f}% "
              f"(largest {100 * z.max():.2f}%)")
    wsd = finals(url, "trunks", False)
    for (n, d), v in sorted(wsd.items()):
        b = trained.get((n, d))
        print(f"N {n:.4g}: WSD trunk final {v:.4f}, largest branch (same rate and data) "
              + (f"{b:.4f} ({100 * (v - b) / b:+.3f}%)" if b is not None else "missing"))


def optimum(url: str, sweep: str, n_bootstrap: int, compute: float | None) -> tuple[Any, Any]:
    """The sweep analysed as ``scaling fit`` does (its trunks' predicted cooldowns entering the laws where the
    curve law is trusted), and its recommendation at ``compute`` FLOPs (None: ten times the largest run); where
    no law can be fitted or none gives an N*, None or the analysis, and why."""
    from scaling.errors import FitError
    from scaling.fitting.analysis import Settings, SweepSource, analyse
    from scaling.fitting.recommend import recommend

    try:
        analysis = analyse(SweepSource(url, sweep), Settings(n_bootstrap=n_bootstrap, tasks=False, next_runs=False),
                           save=False)
    except FitError as exc:
        return None, str(exc)
    try:
        return analysis, recommend(analysis, compute)
    except FitError as exc:
        return analysis, str(exc)


def compare_optima(url: str, n_bootstrap: int) -> None:
    """Each sweep's N* and D* per law at one budget (ten times the trunks sweep's largest run), a flagged law's
    flag in place of its numbers, whether the two sweeps' intervals overlap, and the compute each trained."""
    from scaling.fitting.recommend import default_budget
    from scaling.fitting.sweep_fit import SHORT
    from scaling.fmt import flops, size
    from scaling.orchestrator.status import sweep_status

    t = time.perf_counter()
    compute = default_budget(_c_max(url, "trunks"))
    found = {name: optimum(url, name, n_bootstrap, compute) for name in ("trunks", "branches")}
    print(f"\nN* and D* at C = {flops(compute)} FLOPs (ten times the largest run), each sweep analysed as `scaling fit` "
          f"does ({n_bootstrap} bootstrap replicates; {time.perf_counter() - t:.0f} s)")
    shown: dict[str, dict[str, Any]] = {}
    for name, (analysis, rec) in found.items():
        status = sweep_status(url, name)
        trained = f"{sum(status['counts'].values())} runs trained, {flops(status['flops_spent'])} FLOPs"
        if analysis is None:
            print(f"{name}: {trained}; no N*: {rec}")
            continue
        print(f"{name}: {analysis.n_points} points from the {analysis.n_runs} runs its fits use ({trained})")
        for note in analysis.notes:
            print(f"  note: {note}")
        for kind, why in analysis.skipped.items():
            print(f"  {SHORT.get(kind, kind)}: not fitted ({why})")
        if isinstance(rec, str):
            print(f"  no N*: {rec}")
            continue
        for kind, why in rec.no_optimum.items():
            print(f"  {SHORT.get(kind, kind)}: no N* ({why})")
        for kind, r in rec.per_law.items():
            if kind in rec.unreliable:
                print(f"  {SHORT.get(kind, kind)}: flagged unreliable, no N* given: {rec.unreliable[kind]}")
                continue
            shown.setdefault(kind, {})[name] = r
            print(f"  {SHORT.get(kind, kind)}{' (chosen)' if kind == rec.chosen else ''}: "
                  f"N* {r['N'].text(3, size)}, D* {r['D'].text(3, size)}, loss {r['loss'].text(4)}")
    for kind, by in shown.items():
        if len(by) == 2:
            a, b = by["trunks"]["N"], by["branches"]["N"]
            ends = [a.lo, a.hi, b.lo, b.hi]
            meet = None if any(e is None or not np.isfinite(e) for e in ends) else a.lo <= b.hi and b.lo <= a.hi
            print(f"{SHORT.get(kind, kind)}: N* from trunks / from branches = {a.value / b.value:.3g}; "
                  f"95% intervals {'overlap' if meet else 'not both given' if meet is None else 'do not overlap'}")


def _c_max(url: str, sweep: str) -> float:
    """The largest compute of the sweep's completed runs."""
    from scaling import db

    with db.connect(url) as res:
        return float(res.runs(sweep=sweep)["C"].max())


def main() -> None:
    import torch

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--widths", type=int, nargs="+", default=[16, 32, 48, 64])
    ap.add_argument("--steps", type=int, nargs="+", default=[100, 200, 400, 800])
    ap.add_argument("--warmup", type=int, default=40)
    ap.add_argument("--lr", type=float, default=4e-3)
    ap.add_argument("--eval-every", type=int, default=20)
    ap.add_argument("--eval-tokens", type=int, default=8192)
    ap.add_argument("--bootstrap", type=int, default=50)
    ap.add_argument("--seed", type=int, default=0, help="the runs' seed (initialization and data order)")
    ap.add_argument("--keep", type=Path, default=None,
                    help="a new directory to keep the sweeps' database and runs in (a temporary one otherwise)")
    ap.add_argument("--analyse-only", action="store_true",
                    help="train nothing: compare the sweeps already trained in --keep's database")
    args = ap.parse_args()
    if args.analyse_only and not (args.keep and (args.keep / "trunks.db").is_file()):
        ap.error("--analyse-only needs --keep naming a directory this benchmark kept")
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as scratch:
        tmp = str(args.keep) if args.keep is not None else scratch
        Path(tmp).mkdir(parents=True, exist_ok=True)
        url = f"sqlite:///{tmp}/trunks.db"
        for name, predicted in () if args.analyse_only else (("trunks", True), ("branches", False)):
            start, cpu = time.perf_counter(), time.process_time()
            seconds = sweep_in_process(write_plan(Path(tmp) / f"{name}.yaml", name, Path(tmp) / "runs", args, predicted), url)
            print(f"{name}: trained in {seconds:.0f} s ({time.process_time() - cpu:.0f} s of CPU)", flush=True)
        compare(url, args.bootstrap)
        compare_optima(url, args.bootstrap)


if __name__ == "__main__":
    main()
