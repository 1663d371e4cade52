"""Cooldown branches vs independently trained cosine runs, on the same (N, D) points.

Run by hand: ``python benchmarks/bench_branches.py [--budgets 5] [--c0 3e8] [--widths 6 8 12 16]
[--batch 256] [--lr 3e-2] [--warmup 10] [--cpus 2]``.

The grid is IsoFLOP-aligned so approach 2 has budgets to fit: model sizes (two layers, heads 2 or
4 wide) and, for budget k = 1..K, the token count D = k C0 / (6 N) of each size. The *cosine*
sweep trains each point from scratch with a cosine schedule; the *branches* sweep trains one
constant-LR trunk per size and branches it at every D with a 20% linear cooldown (Hägele et al.
2024). Both go through `scaling sweep`'s code (Ray, the database, the fits).

The comparison is like for like, as in Hägele et al.: both sweeps share the peak LR (``--lr``),
the final LR (10% of the peak: cosine decays to it at its last step, a branch's cooldown ends
there), the warmup (``--warmup`` steps, the same for every run and every trunk, so a short run
does not warm up for less than the trunk it is compared with), the batch, the data order and the
initialization (same seed). Printed:

- final eval loss of every point, branch vs cosine, and the largest relative difference (goal <= 1%);
- approach 2's ``a`` and approach 3's ``alpha``, ``beta`` and ``a`` for both sweeps with their
  95% bootstrap intervals, and whether each estimate lies in the other sweep's interval;
- the compute each sweep trained, counted once (a branch adds only its cooldown), and the
  ratio branches / cosine (goal <= 1/2; linearly spaced budgets reach it from K = 5).
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

if TYPE_CHECKING:
    from scaling.fmt import Interval

#: Two layers: N (non-embedding) = 24 d^2 + 28 d = 1,032, 1,760, 3,792, 6,592.
WIDTHS = (6, 8, 12, 16)


def models(widths: tuple[int, ...]) -> list[dict[str, int]]:
    return [{"n_layer": 2, "d_model": d, "n_head": d // 4 if d % 4 == 0 else d // 2} for d in widths]


def n_params(m: dict[str, int]) -> int:
    from scaling.accounting import Shape

    return Shape(m["n_layer"], m["d_model"], m["n_head"], 256, 64).params("non_embedding")


def write_plan(path: Path, name: str, runs_dir: Path, budgets: list[float], *, branches: bool, cpus: int,
               widths: tuple[int, ...], batch: int, lr: float, warmup: int) -> Path:
    grid = []
    for m in models(widths):
        tokens = [max(batch * 5, round(C / (6 * n_params(m)) / batch) * batch) for C in budgets]
        block: dict[str, Any] = {"models": [m]}
        block["branches" if branches else "tokens"] = (
            {"tokens": tokens, "cooldown_fraction": 0.2, "shape": "linear"} if branches else tokens
        )
        grid.append(block)
    plan = {
        "name": name,
        "runs_dir": str(runs_dir),
        "data": {"source": "builtin"},
        "model": {"vocab_size": 256, "context": 64},
        "train": {
            "precision": "fp32",
            "batch_tokens": batch,
            "optimizer": {"lr": lr, "weight_decay": 0.1},
            "schedule": {"kind": "cosine", "warmup_steps": warmup, "min_lr_ratio": 0.1},
            "eval_interval": 100_000,
            "eval_tokens": 16384,
            "checkpoint_interval": 500,
            "log_interval": 10,
            "threads": 1,
        },
        "resources": {"workers": 1, "cpus_per_worker": 1, "num_cpus": cpus},
        "retries": 1,
        "grid": grid,
    }
    path.write_text(yaml.safe_dump(plan, sort_keys=False))
    return path


def sweep(plan: Path, url: str) -> float:
    from scaling.orchestrator.sweep import run_sweep

    t0 = time.perf_counter()
    out = run_sweep(plan, db=url, fit=False, report=False, echo=lambda s: None).outcome
    if out is None or not out.ok:
        sys.exit(f"sweep {plan.name} did not complete: {out}")
    return time.perf_counter() - t0


def sweep_in_process(plan_path: Path, url: str) -> float:
    """The same runs, expanded and recorded as `scaling sweep` does, trained one after another in
    this process (trunks before their branches) instead of as Ray tasks: for a machine too busy
    to start Ray's processes in time. The trainer, the checkpoints a branch starts from, the
    database and the compute accounting are the sweep's own."""
    from scaling import vocab
    from scaling.db import Store
    from scaling.orchestrator.expand import Expansion, expand
    from scaling.orchestrator.plan import load_plan
    from scaling.orchestrator.sweep import register
    from scaling.trainer import train

    t0 = time.perf_counter()
    plan, source = load_plan(plan_path)
    runs = expand(plan, source).runs
    runs.sort(key=lambda r: r.spec.branch is not None)  # every trunk before any branch
    with Store(url) as store:
        register(store, plan, Expansion(plan, runs))
        for r in runs:
            attempt = store.claim(r.key, "bench:0", sweep=plan.name)
            if attempt is None:
                continue
            run_dir = Path(plan.runs_dir) / plan.name / r.key
            run_dir.mkdir(parents=True, exist_ok=True)
            res = train(r.spec, url, str(run_dir), attempt=attempt, sweep=plan.name)
            if res.status != vocab.COMPLETED:
                sys.exit(f"run {r.key} of {plan.name} ended {res.status}")
            store.finish(r.key, vocab.COMPLETED, final_train_loss=res.final_train_loss,
                         final_eval_loss=res.final_eval_loss, sweep=plan.name)
    return time.perf_counter() - t0


def fit(url: str, name: str, n_bootstrap: int) -> dict[str, Any]:
    from scaling.errors import FitError
    from scaling.fitting.sweep_fit import fit_data
    from scaling.fitting.core.sweep_data import from_db

    data, _ = from_db(url, name)
    out: dict[str, Any] = {}
    for law, params in (("approach2", ("a",)), ("approach3", ("alpha", "beta", "a"))):
        try:
            summary = fit_data(data, law, n_bootstrap=n_bootstrap, seed=0, run_backtest=False)
        except FitError as exc:
            out[law] = str(exc)
            continue
        fitted = summary.laws[law]
        ivs = fitted.intervals()
        out[law] = {p: ivs[p] for p in params}
        out[law]["notes"] = list(fitted.notes_)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budgets", type=int, default=5, help="IsoFLOP budgets k C0, k = 1..K (>= 3)")
    ap.add_argument("--c0", type=float, default=3e8, help="the smallest budget in FLOPs")
    ap.add_argument("--widths", type=int, nargs="+", default=list(WIDTHS), help="d_model of each size (>= 4 sizes)")
    ap.add_argument("--batch", type=int, default=256, help="batch in tokens (sequences of 64)")
    ap.add_argument("--lr", type=float, default=3e-2, help="peak learning rate of every run and trunk")
    ap.add_argument("--warmup", type=int, default=10, help="warmup steps of every run and trunk")
    ap.add_argument("--cpus", type=int, default=2, help="runs at once")
    ap.add_argument("--bootstrap", type=int, default=200)
    ap.add_argument("--keep", type=Path, default=None, help="keep the database and runs here")
    ap.add_argument("--in-process", action="store_true",
                    help="train the runs one by one in this process instead of on Ray (a machine too busy for Ray)")
    args = ap.parse_args()
    if args.budgets < 3 or len(args.widths) < 4:
        sys.exit("--budgets must be at least 3 and --widths name at least 4 sizes")
    budgets = [k * args.c0 for k in range(1, args.budgets + 1)]
    work = args.keep or Path(tempfile.mkdtemp(prefix="bench_branches_"))
    work.mkdir(parents=True, exist_ok=True)
    url = f"sqlite:///{work / 'bench.db'}"

    from scaling.db import connect
    from scaling.orchestrator.status import sweep_status

    walls, losses, compute = {}, {}, {}
    for name, branches in (("cosine", False), ("branches", True)):
        plan = write_plan(work / f"{name}.yaml", name, work / "runs", budgets, branches=branches, cpus=args.cpus,
                          widths=tuple(args.widths), batch=args.batch, lr=args.lr, warmup=args.warmup)
        walls[name] = (sweep_in_process if args.in_process else sweep)(plan, url)
        runs = connect(url).runs(sweep=name)
        trunks = set(runs["parent_key"].dropna())
        points = runs[~runs["run_key"].isin(trunks)]
        losses[name] = {(int(r.N), int(r.D)): float(r.final_loss) for r in points.itertuples()}
        compute[name] = sweep_status(url, name)

    print(f"grid: {len(args.widths)} sizes x {args.budgets} budgets ({budgets[0]:.3g} .. {budgets[-1]:.3g} FLOPs), "
          f"batch {args.batch} tokens, peak lr {args.lr:g} to 10% of it, {args.warmup} warmup steps; work folder {work}")
    print("\nfinal eval loss per point (N, D): cosine from scratch vs cooldown branch")
    diffs = []
    for key in sorted(losses["cosine"]):
        c, b = losses["cosine"][key], losses["branches"].get(key, math.nan)
        diffs.append(abs(b - c) / c)
        print(f"  N={key[0]:>6,} D={key[1]:>9,}  cosine {c:.4f}  branch {b:.4f}  {100 * (b - c) / c:+.2f}%")
    print(f"  largest |difference| {100 * max(diffs):.2f}%, mean {100 * sum(diffs) / len(diffs):.2f}% (goal: <= 1%)")

    print("\nexponents (95% bootstrap interval); 'in' = the estimate lies in the other sweep's interval")
    fits = {name: fit(url, name, args.bootstrap) for name in ("cosine", "branches")}
    for law in ("approach2", "approach3"):
        cos, br = fits["cosine"][law], fits["branches"][law]
        if isinstance(cos, str) or isinstance(br, str):
            print(f"  {law}: not fitted (cosine: {cos if isinstance(cos, str) else 'ok'}; "
                  f"branches: {br if isinstance(br, str) else 'ok'})")
            continue
        for p in (k for k in cos if k != "notes"):
            print(f"  {law} {p:>5}: cosine {_iv(cos[p])}  branches {_iv(br[p])}  "
                  f"cosine in branches' {_inside(cos[p], br[p])}, branches in cosine's {_inside(br[p], cos[p])}")
        for name, f in (("cosine", cos), ("branches", br)):
            for note in f["notes"]:
                print(f"    {name} note: {note}")

    cos_c, br_c = compute["cosine"]["flops_spent"], compute["branches"]["flops_spent"]
    print(f"\ncompute trained: cosine {cos_c:.4g} FLOPs, branches {br_c:.4g} FLOPs (trunks once, cooldowns added)")
    print(f"  branches / cosine = {br_c / cos_c:.3f} (goal: <= 0.5); "
          f"branch sweep's points from scratch would cost {compute['branches']['flops_total_without_reuse']:.4g}")
    print(f"  wall time: cosine {walls['cosine']:.0f} s, branches {walls['branches']:.0f} s "
          f"(ratio {walls['branches'] / walls['cosine']:.2f}, "
          + ("one run at a time in process)" if args.in_process else f"Ray start-up included, {args.cpus} runs at once)"))


def _iv(iv: Interval) -> str:
    if iv.interval is None:
        return f"{iv.value:.3f} [{iv.withheld or 'no interval'}]"
    return f"{iv.value:.3f} [{iv.lo:.3f}, {iv.hi:.3f}]"


def _inside(a: Interval, b: Interval) -> str:
    if b.interval is None:
        return "n/a"
    return "yes" if b.covers(a.value) else "NO"


if __name__ == "__main__":
    main()
