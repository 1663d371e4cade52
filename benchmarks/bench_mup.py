"""μP against the standard parametrization on a CPU: one learning-rate grid over several widths.

Every (parametrization, width, D, lr) is a real run of the trainer (gpt2, 2 layers, 4 heads, the
built-in byte corpus, context 64, 512 tokens a batch, cosine schedule, fp32); its final eval loss
goes to a CSV. The μP runs use ``base_width`` = the narrowest width. Then, per parametrization,
the hyperparameter laws (``scaling.fitting.hyperparams.hparams``: each (N, D) point's runs are a group) give
lr* = c N^a D^b: under μP the exponent a of N should be near 0, under the standard
parametrization negative. Writes ``runs.csv``, ``summary.json`` and a hand-written SVG figure
(loss against lr, one curve per width, one panel per parametrization) into ``--out``.

    PYTHONPATH=. python benchmarks/bench_mup.py --out /tmp/mup [--workers 2]

docs/experiments/2026-12-05-mup.md has the numbers of one run.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

WIDTHS = (32, 64, 128)
LRS = (2e-3, 4e-3, 8e-3, 1.6e-2, 3.2e-2, 6.4e-2)
CONTEXT = 64
BATCH = 512  # tokens: 8 sequences
STEPS = (200, 400)  # two token budgets, so that lr*'s exponents of N and D are told apart
PARAMETRIZATIONS = ("standard", "mup")


def spec_dict(parametrization: str, width: int, steps: int, lr: float) -> dict[str, Any]:
    model: dict[str, Any] = {"n_layer": 2, "d_model": width, "n_head": 4, "vocab_size": 256, "context": CONTEXT}
    if parametrization == "mup":
        model.update(parametrization="mup", base_width=WIDTHS[0])
    return {
        "model": model, "tokens": steps * BATCH, "batch_tokens": BATCH, "precision": "fp32",
        "optimizer": {"lr": lr, "weight_decay": 0.1}, "eval_tokens": 64 * CONTEXT,
        "execution": {"eval_interval": 10_000, "checkpoint_interval": 10_000, "log_interval": 50, "threads": 1},
        "evals": {"next_line": False}, "spike": {"enabled": False},
    }


def train_one(args: tuple[str, int, int, float]) -> dict[str, Any]:
    import torch

    from scaling.trainer import train
    from scaling.trainer.spec import RunSpec

    torch.set_num_threads(1)
    parametrization, width, steps, lr = args
    spec = RunSpec.from_dict(spec_dict(parametrization, width, steps, lr))
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as folder:
        result = train(spec, None, Path(folder))
    loss = result.final_eval_loss
    return {"parametrization": parametrization, "width": width, "N": spec.n_params, "D": spec.tokens,
            "C": 6.0 * spec.n_params * spec.tokens, "lr": lr, "batch": BATCH,
            "loss": loss if loss is not None and math.isfinite(loss) else float("nan"),
            "seconds": time.perf_counter() - start, "group": f"{parametrization} d{width} D={spec.tokens}"}


def fit(rows: list[dict[str, Any]], parametrization: str) -> dict[str, Any]:
    """Each group's optimum and the law lr* = c N^a D^b over the runs of ``parametrization``."""
    import pandas as pd

    from scaling.fitting.hyperparams.hparams import fit_hparams

    runs = pd.DataFrame([r for r in rows if r["parametrization"] == parametrization])
    result = fit_hparams(runs[["N", "D", "C", "loss", "lr", "batch", "group"]], n_bootstrap=200)
    if result is None:
        return {"groups": [], "notes": ["no groups"]}
    out: dict[str, Any] = {"notes": list(result.notes), "groups": [
        {"label": g.label, "N": g.N, "D": g.D, "status": g.status, "message": g.message,
         "lr_star": g.lr.to_dict(), "loss_star": g.loss.to_dict()} for g in result.groups]}
    law = result.laws.get("lr_ND")
    if law is not None:
        out["lr_ND"] = {"params": {p: iv.to_dict() for p, iv in law.params.items()}, "doubts": law.doubts(),
                        "notes": law.notes, "groups": law.n_groups}
    else:
        out["lr_ND_skipped"] = result.skipped.get("lr_ND")
    return out


def svg(rows: list[dict[str, Any]], steps: int) -> str:
    """Loss against lr (log axis), one line per width, one panel per parametrization, at D = steps * BATCH."""
    colours = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd")
    D = steps * BATCH
    pick = [r for r in rows if r["D"] == D and math.isfinite(r["loss"])]
    losses = [r["loss"] for r in pick]
    lo, hi = min(losses), min(max(losses), min(losses) + 1.5)
    W, H, pad, gap = 900, 380, 55, 40
    pw = (W - 2 * pad - gap) / 2
    ph = H - 2 * pad
    lx0, lx1 = math.log10(LRS[0]), math.log10(LRS[-1])

    def x(panel: int, lr: float) -> float:
        return pad + panel * (pw + gap) + (math.log10(lr) - lx0) / (lx1 - lx0) * pw

    def y(loss: float) -> float:
        return pad + (1 - (min(loss, hi) - lo) / (hi - lo)) * ph

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
           f'<rect width="{W}" height="{H}" fill="white"/>']
    for panel, parametrization in enumerate(PARAMETRIZATIONS):
        x0 = pad + panel * (pw + gap)
        title = "standard parametrization" if parametrization == "standard" else f"μP (base width {WIDTHS[0]})"
        out.append(f'<text x="{x0 + pw / 2}" y="{pad - 20}" text-anchor="middle" font-size="14">{title}, D = {D:,} tokens</text>')
        out.append(f'<rect x="{x0}" y="{pad}" width="{pw}" height="{ph}" fill="none" stroke="#999"/>')
        for lr in LRS:
            out.append(f'<text x="{x(panel, lr)}" y="{pad + ph + 16}" text-anchor="middle">{lr:g}</text>')
        out.append(f'<text x="{x0 + pw / 2}" y="{pad + ph + 34}" text-anchor="middle">peak learning rate</text>')
        for k in range(6):
            v = lo + k * (hi - lo) / 5
            out.append(f'<text x="{x0 - 5}" y="{y(v) + 4}" text-anchor="end">{v:.2f}</text>')
        for i, width in enumerate(WIDTHS):
            pts = sorted((r["lr"], r["loss"]) for r in pick if r["parametrization"] == parametrization and r["width"] == width)
            if not pts:
                continue
            path = " ".join(f"{x(panel, a):.1f},{y(b):.1f}" for a, b in pts)
            out.append(f'<polyline points="{path}" fill="none" stroke="{colours[i]}" stroke-width="2"/>')
            best = min(pts, key=lambda p: p[1])
            out.append(f'<circle cx="{x(panel, best[0]):.1f}" cy="{y(best[1]):.1f}" r="5" fill="{colours[i]}"/>')
            if panel == 1:
                out.append(f'<text x="{x0 + pw - 70}" y="{pad + 18 + 16 * i}" fill="{colours[i]}">d_model {width}</text>')
    out.append(f'<text x="14" y="{pad + ph / 2}" transform="rotate(-90 14 {pad + ph / 2})" text-anchor="middle">final eval loss (nats/byte)</text>')
    out.append("</svg>")
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--fit-only", action="store_true", help="fit and draw the runs.csv already in --out")
    parser.add_argument("--resume", action="store_true", help="keep the runs of --out's runs.csv, train the rest")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.fit_only:
        import pandas as pd

        rows = pd.read_csv(args.out / "runs.csv").to_dict("records")
        report(args.out, rows, None)
        return
    os.environ.setdefault("SCALING_PEAK_FLOPS", "1e11")  # MFU without the matmul probe
    # The standard runs at the first budget only; μP's at both.
    jobs = [(p, w, s, lr) for s in STEPS for p in PARAMETRIZATIONS for w in WIDTHS for lr in LRS
            if s == STEPS[0] or p == "mup"]
    jobs.sort(key=lambda j: -j[1] * j[1] * j[2])  # longest first
    rows: list[dict[str, Any]] = []
    if args.resume and (args.out / "runs.csv").exists():
        import pandas as pd

        rows = pd.read_csv(args.out / "runs.csv").to_dict("records")
        done = {(r["parametrization"], r["width"], r["D"] // BATCH, r["lr"]) for r in rows}
        jobs = [j for j in jobs if j not in done]
    start = time.perf_counter()
    with ProcessPoolExecutor(args.workers) as pool:
        for row in pool.map(train_one, jobs):
            rows.append(row)
            print(f"{len(rows)} {row['group']} lr={row['lr']:g} loss={row['loss']:.4f} "
                  f"{row['seconds']:.0f} s", flush=True)
    wall = time.perf_counter() - start
    import pandas as pd

    pd.DataFrame(rows).to_csv(args.out / "runs.csv", index=False)
    report(args.out, rows, wall)  # wall: this invocation's


def report(out: Path, rows: list[dict[str, Any]], wall: float | None) -> None:
    """summary.json (the fits, the times) and the figure."""
    summary = {"date": time.strftime("%Y-%m-%d"), "runs": len(rows), "wall_s": wall,
               "train_s": sum(r["seconds"] for r in rows),
               "fits": {p: fit(rows, p) for p in PARAMETRIZATIONS}}
    (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
    (out / "mup-lr-sweep.svg").write_text(svg(rows, STEPS[0]))
    print(json.dumps(summary, indent=1, default=str))


if __name__ == "__main__":
    main()
