"""The curve law on real CPU training: fitted on three schedules per model size, predicting two others.

Every run is a real run of the trainer (gpt2, 2 layers, 4 heads, the built-in byte corpus, context 64,
512 tokens a batch, fp32, one thread, seed 0 so that every schedule sees the same batches), at
``--widths`` (d_model), each under five schedules of ``--steps`` steps after a ``--warmup``-step linear
warmup to ``--lr``: constant, cosine to a tenth, two-stage (a tenth ... : the peak until half the run,
then ``TWO_STAGE_RATIO`` x peak), and warmup-stable-decay over the last ``--decay`` of the steps to a
tenth, exponentially and linearly. The eval loss (``--eval-tokens`` held-out tokens) every
``--eval-every`` steps is each run's curve; the rate of every step is rebuilt from its spec as the
fits do (:func:`scaling.fitting.curves.data.run_curve`).

Per size, both curve-law forms are fitted (:class:`scaling.fitting.curves.CurveLaw`) on the constant,
cosine and two-stage curves, as Luo et al. 2025 do, and predict the two WSD curves. Printed: per form
and size, the mean absolute error and the mean relative error of the held-out curves' points after
warmup (Luo et al.'s measure; they report 0.1-0.2%), the same at the final step, and the error of a
naive prediction (the constant run's loss at the same step: what one knows without a law); the
chosen form's bootstrap 95% interval of each held-out final loss and whether it holds the measured one.

    PYTHONPATH=. python benchmarks/bench_curves_cpu.py --out /tmp/curves-cpu

Writes ``curves.csv`` (``run, step, lr, loss, N``: ``scaling fit --csv curves.csv --law curve`` reads
it), ``errors.csv`` and ``summary.json`` into ``--out``; a second call with the same ``--out`` reuses
the trained curves (``--retrain`` to train again). docs/experiments/2026-12-07-curves-cpu.md has the
numbers of one run.
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

CONTEXT = 64
BATCH = 512  # tokens: 8 sequences of 64
TWO_STAGE_RATIO = 0.3
FLOOR = 0.1
FIT_ON = ("constant", "cosine", "two_stage")
HELD_OUT = ("wsd_exponential", "wsd_linear")


def schedules(warmup: int, decay: float) -> dict[str, dict[str, Any]]:
    """The five schedules by name (a spec's ``schedule`` section)."""
    common = {"warmup_steps": warmup, "min_lr_ratio": FLOOR}
    return {"constant": {"kind": "constant", **common},
            "cosine": {"kind": "cosine", **common},
            "two_stage": {"kind": "two_stage", "drop_at": 0.5, "drop_lr_ratio": TWO_STAGE_RATIO, **common},
            "wsd_exponential": {"kind": "wsd", "decay_fraction": decay, "decay_shape": "exponential", **common},
            "wsd_linear": {"kind": "wsd", "decay_fraction": decay, "decay_shape": "linear", **common}}


def spec_dict(width: int, schedule: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    return {
        "model": {"n_layer": 2, "d_model": width, "n_head": 4, "vocab_size": 256, "context": CONTEXT},
        "tokens": args.steps * BATCH, "batch_tokens": BATCH, "precision": "fp32", "seed": 0,
        "optimizer": {"lr": args.lr, "weight_decay": 0.1}, "schedule": schedule, "eval_tokens": args.eval_tokens,
        "execution": {"eval_interval": args.eval_every, "checkpoint_interval": 10 * args.steps, "log_interval": 100,
                      "threads": 1},
        "evals": {"next_line": False}, "spike": {"enabled": False},
    }


def train_curves(args: argparse.Namespace) -> pd.DataFrame:
    """Train every (width, schedule) run; one row per evaluation: run, width, N, step, loss, seconds."""
    import torch

    from scaling.trainer import train
    from scaling.trainer.spec import RunSpec

    torch.set_num_threads(1)
    rows = []
    for width in args.widths:
        for name, schedule in schedules(args.warmup, args.decay).items():
            spec = RunSpec.from_dict(spec_dict(width, schedule, args))
            evals: list[tuple[int, float]] = []
            start, cpu = time.perf_counter(), time.process_time()
            with tempfile.TemporaryDirectory() as folder:
                train(spec, None, Path(folder),
                      report=lambda step, m, _: evals.append((step, m["eval_loss"])) if "eval_loss" in m else None)
            seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
            print(f"  d{width} {name}: {len(evals)} evaluations, final eval loss {evals[-1][1]:.4f}, {seconds:.1f} s "
                  f"({cpu:.1f} s of CPU)", flush=True)
            rows += [{"run": f"d{width}_{name}", "schedule": name, "width": width, "N": spec.n_params, "step": s,
                      "loss": v, "seconds": seconds, "cpu_seconds": cpu, "spec": json.dumps(spec.model_dump(mode="json"))}
                     for s, v in evals]
    return pd.DataFrame(rows)


def curves_of(frame: pd.DataFrame) -> dict[str, Any]:
    """Each run's :class:`~scaling.fitting.curves.data.Curve`, its rate rebuilt from its spec as the fits do."""
    from scaling.fitting.curves.data import run_curve

    out = {}
    for run, rows in frame.groupby("run", sort=False):
        spec = json.loads(rows["spec"].iloc[0])
        out[run] = run_curve(run, spec, rows["step"].to_numpy(), rows["loss"].to_numpy(float), float(rows["N"].iloc[0]))
    return out


def errors(args: argparse.Namespace, frame: pd.DataFrame) -> tuple[pd.DataFrame, list[dict[str, Any]]]:
    """Per size: both forms fitted on :data:`FIT_ON`, their errors on :data:`HELD_OUT`, and the chosen
    form's intervals of the held-out final losses."""
    from scaling.curve_forms import warmup_end
    from scaling.fitting.curves import CurveLaw
    from scaling.fitting.curves.data import Schedule

    curves = curves_of(frame)
    table, finals = [], []
    for width in args.widths:
        fit = [curves[f"d{width}_{n}"] for n in FIT_ON]
        start = time.perf_counter()
        law = CurveLaw().fit(fit).bootstrap(args.bootstrap, 0)
        seconds = time.perf_counter() - start
        constant = curves[f"d{width}_constant"]
        for form in law.forms:
            for name in HELD_OUT:
                c = curves[f"d{width}_{name}"]
                after = c.steps >= warmup_end(c.lr)
                steps, y = c.steps[after], c.loss[after]
                pred = law.loss_at(c.lr, steps, form)
                naive = np.interp(steps, constant.steps, constant.loss)
                table.append({"width": width, "N": fit[0].N, "form": form, "chosen": form == law.form_,
                              "held_out": name, "mae": float(np.mean(np.abs(pred - y))),
                              "mre": float(np.mean(np.abs(pred - y) / y)),
                              "final_error": float(abs(pred[-1] - y[-1]) / y[-1]),
                              "naive_mae": float(np.mean(np.abs(naive - y))),
                              "naive_mre": float(np.mean(np.abs(naive - y) / y)),
                              "naive_final_error": float(abs(naive[-1] - y[-1]) / y[-1]),
                              "fit_seconds": seconds})
        for name in HELD_OUT:
            c = curves[f"d{width}_{name}"]
            row = law.predict(Schedule(name, c.lr, c.steps[-1:])).iloc[0]
            finals.append({"width": width, "held_out": name, "form": law.form_, "measured": float(c.loss[-1]),
                           "predicted": float(row.loss), "lo": float(row.lo), "hi": float(row.hi),
                           "covered": bool(row.lo <= c.loss[-1] <= row.hi)})
        print(law.table(), flush=True)
    return pd.DataFrame(table), finals


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--widths", type=int, nargs="+", default=[32, 64, 96])
    ap.add_argument("--steps", type=int, default=1200)
    ap.add_argument("--warmup", type=int, default=60)
    ap.add_argument("--decay", type=float, default=0.2, help="share of the steps a WSD schedule decays over")
    ap.add_argument("--lr", type=float, default=4e-3)
    ap.add_argument("--eval-every", type=int, default=25)
    ap.add_argument("--eval-tokens", type=int, default=8192)
    ap.add_argument("--bootstrap", type=int, default=100)
    ap.add_argument("--retrain", action="store_true", help="train again even if --out holds curves")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    raw = args.out / "evals.csv"
    start = time.perf_counter()
    if raw.exists() and not args.retrain:
        frame = pd.read_csv(raw)
        print(f"curves read from {raw}")
    else:
        frame = train_curves(args)
        frame.to_csv(raw, index=False)
    train_seconds = float(frame.groupby("run")["seconds"].first().sum())
    cpu_seconds = float(frame.groupby("run")["cpu_seconds"].first().sum()) if "cpu_seconds" in frame else float("nan")
    curves = curves_of(frame)
    rows = [{"run": run, "step": int(s), "lr": float(c.lr[s]), "loss": float(v), "N": c.N}
            for run, c in curves.items() for s, v in zip(c.steps, c.loss)]
    pd.DataFrame(rows).to_csv(args.out / "curves.csv", index=False)
    table, finals = errors(args, frame)
    table.to_csv(args.out / "errors.csv", index=False)
    by_form = table.groupby("form")[["mae", "mre", "final_error", "naive_mae", "naive_mre", "naive_final_error"]].mean()
    print(f"\n{len(curves)} runs trained in {train_seconds:.0f} s ({cpu_seconds:.0f} s of CPU, one thread); "
          "fits and bootstraps "
          f"{time.perf_counter() - start:.0f} s in all")
    print(table.drop(columns=["fit_seconds"]).to_string(index=False, float_format=lambda v: f"{v:.5f}"))
    print("\nmean over sizes and held-out curves (relative errors as shares):")
    print(by_form.to_string(float_format=lambda v: f"{v:.5f}"))
    print("\nheld-out final losses, the chosen form's 95% interval:")
    for f in finals:
        print(f"  d{f['width']} {f['held_out']}: measured {f['measured']:.4f}, predicted {f['predicted']:.4f} "
              f"[{f['lo']:.4f}, {f['hi']:.4f}] ({f['form']}){'' if f['covered'] else '  NOT COVERED'}")
    summary = {"args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
               "train_seconds": train_seconds, "cpu_seconds": cpu_seconds,
               "by_form": by_form.reset_index().to_dict(orient="records"),
               "finals": finals, "rows": table.to_dict(orient="records")}
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1, default=float) + "\n")


if __name__ == "__main__":
    main()
