"""Early stopping of trained runs on the CPU: predicted finals against the finals trained in full.

Tiny GPT-2 models (one block, width 16 to 48, context 32, batches of 8 sequences, cosine schedule
with peak 3e-3) train on the bundled corpus through the trainer's entry point (`scaling.trainer.train`,
the real loop) into a real SQLite database, one thread each. References: ``--widths`` times
``--lengths`` runs trained in full, each evaluated at tenths of its steps. Targets: each width of
``--targets`` at ``--target-steps`` steps, trained once with ``early_stop`` (``--tolerance``,
``--after``, ``--every``) in the references' sweep, and once without in a database of its own, for
its measured final loss. Each target is registered, claimed, trained and completed as the scheduler
does it; a target trained to its end becomes a reference for the next, as in a sweep.

Prints per target and seed: where it stopped, its predicted final with its 95% interval, the final
trained in full, the error and whether the interval covered it; and the share of the targets' steps
and of their FLOPs not trained.

    python benchmarks/bench_early_stop_real.py [--seeds 3] [--tolerance 0.05] [--after 0.5] [--every 0.1]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from scaling.db import Store  # noqa: E402
from scaling.trainer import train  # noqa: E402
from scaling.trainer.spec import RunSpec  # noqa: E402
from bench_early_stop import add_rule_arguments  # noqa: E402 - the rule's options, as the simulated benchmark takes them

CONTEXT, SEQUENCES = 32, 8


def fields(width: int, steps: int, seed: int, rule: dict[str, float] | None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "model": {"n_layer": 1, "d_model": width, "n_head": 2, "context": CONTEXT},
        "tokens": CONTEXT * SEQUENCES * steps, "batch_tokens": CONTEXT * SEQUENCES, "eval_tokens": CONTEXT * 64,
        "optimizer": {"lr": 3e-3}, "schedule": {"kind": "cosine", "warmup_steps": 5, "min_lr_ratio": 0.1},
        "seed": seed, "evals": {"next_line": False},
        "execution": {"eval_interval": steps // 10, "checkpoint_interval": steps, "threads": 1},
    }
    if rule is not None:
        out["early_stop"] = rule
    return out


def trained(url: str, sweep: str, spec: RunSpec, run_dir: Path) -> Any:
    """Register, claim, train and complete ``spec`` as the scheduler does; its result."""
    with Store(url) as store:
        store.register(sweep, [spec.record()])
        attempt = store.claim(spec.key, "bench", sweep=sweep)
        result = train(spec, url, run_dir, attempt=attempt, sweep=sweep)
        store.complete(spec.key, final_train_loss=result.final_train_loss, final_eval_loss=result.final_eval_loss,
                       sweep=sweep)
    return result


def one_seed(tmp: Path, seed: int, args: argparse.Namespace) -> list[dict[str, Any]]:
    url, truth_url = f"sqlite:///{tmp / f'sweep{seed}.db'}", f"sqlite:///{tmp / f'truth{seed}.db'}"
    for width in args.widths:
        for steps in args.lengths:
            spec = RunSpec.from_dict(fields(width, steps, seed, None))
            trained(url, "real", spec, tmp / f"ref{seed}-{width}-{steps}")
    rule = {"tolerance": args.tolerance, "after": args.after, "every": args.every}
    rows = []
    for width in args.targets:
        spec = RunSpec.from_dict(fields(width, args.target_steps, seed, rule))
        early = trained(url, "real", spec, tmp / f"early{seed}-{width}")
        full = trained(truth_url, "truth", RunSpec.from_dict(fields(width, args.target_steps, seed, None)),
                       tmp / f"full{seed}-{width}")
        stop = early.data.get("stopped_early")
        rows.append({"seed": seed, "width": width, "N": spec.n_params, "steps": spec.steps, "stopped": early.steps,
                     "flops_per_step": spec.flops_per_token * spec.batch_tokens,
                     "predicted": early.final_eval_loss, "lo": stop["lo"] if stop else None,
                     "hi": stop["hi"] if stop else None, "full": full.final_eval_loss})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--widths", type=int, nargs="+", default=[16, 32, 48])
    ap.add_argument("--lengths", type=int, nargs="+", default=[40, 80, 120])
    ap.add_argument("--targets", type=int, nargs="+", default=[24, 40, 64])
    ap.add_argument("--target-steps", type=int, default=100)
    add_rule_arguments(ap)
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in range(args.seeds):
            t0 = time.perf_counter()
            for r in one_seed(Path(tmp), seed, args):
                rows.append(r)
                if r["lo"] is None:
                    print(f"seed {seed} width {r['width']} (N {r['N']:,}): trained to step {r['stopped']} of {r['steps']}, "
                          f"final {r['full']:.4f}", flush=True)
                    continue
                err, cov = r["predicted"] - r["full"], r["lo"] <= r["full"] <= r["hi"]
                print(f"seed {seed} width {r['width']} (N {r['N']:,}): stopped at step {r['stopped']} of {r['steps']}, "
                      f"predicted {r['predicted']:.4f} [{r['lo']:.4f}, {r['hi']:.4f}], trained in full {r['full']:.4f}, "
                      f"error {err:+.4f}, {'covered' if cov else 'NOT covered'}", flush=True)
            print(f"seed {seed}: {time.perf_counter() - t0:.0f} s", flush=True)
    stopped = [r for r in rows if r["lo"] is not None]
    errors = np.array([abs(r["predicted"] - r["full"]) for r in stopped]) if stopped else np.array([np.nan])
    saved = sum(r["steps"] - r["stopped"] for r in rows) / sum(r["steps"] for r in rows)
    flops = sum((r["steps"] - r["stopped"]) * r["flops_per_step"] for r in rows) / sum(r["steps"] * r["flops_per_step"] for r in rows)
    print(f"summary: {len(stopped)} of {len(rows)} targets stopped early (tolerance {args.tolerance:g}, after "
          f"{args.after:g}, every {args.every:g}); not trained: {100 * saved:.0f}% of their steps, {100 * flops:.0f}% of their FLOPs; predicted finals: mean "
          f"|error| {np.mean(errors):.4f}, max {np.max(errors):.4f}, intervals covering the final trained in full "
          f"{sum(r['lo'] <= r['full'] <= r['hi'] for r in stopped)}/{len(stopped)}")


if __name__ == "__main__":
    main()
