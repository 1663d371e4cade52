"""Coverage of the curve law's 95% intervals on held-out schedules, curves drawn by the simulated trainer.

Each draw simulates (`scaling.trainer.simulate.simulated_run`, no database) runs of one size whose eval
losses follow a known curve law in their learning-rate schedules (``simulate.curve``: the
multi-power law with Luo et al.'s published 25M parameters, or Tissue et al.'s annealing law),
with log-normal noise of SD ``--noise`` per evaluation. The law is fitted (in its true form) to four
runs: constant, cosine and WSD (linear decay over the last 20% and over the last half) of 2,400
steps after a 216-step warmup to 3e-4 (a tenth of Luo et al.'s lengths; the trainer's schedules have
no two-stage drop, which Luo et al. fit on, so a second decay length stands in for it), and
bootstrapped (``--bootstrap`` replicates over whole curves). It then predicts the final loss of four
held-out runs: constant and cosine of 7,200 steps, WSD with 1-sqrt decay, and WSD decaying over the
last 30% (decays between those fitted: a decay sharper than any fitted one is an extrapolation the
intervals are not meant to cover). A draw covers a run when the
noiseless final loss lies inside the prediction's 95% interval.

Prints the coverage of each form (goal: >= 90%), the mean absolute error of the predictions, and the
share of draws in which the automatic choice between the forms picked the true one.

    python benchmarks/bench_curve_coverage.py [--draws 40] [--bootstrap 60] [--noise 0.001]

``--published`` instead measures accuracy on curves of Luo et al.'s full-length schedules drawn from
their published 25M fit (`scaling.fitting.curves.synthetic`, Gaussian noise 0.003, an evaluation every
50 steps): fitted on the cosine 24k, constant 24k and two-stage 9e-5 curves, the six others predicted;
the mean absolute and relative errors of each form (against the noisy and the noiseless curves) and
the fit's time.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from scaling import vocab
from scaling.curve_forms import ANNEALING, MULTI_POWER
from scaling.fitting.curves import CurveLaw
from scaling.fitting.curves.data import Schedule, run_curve
from scaling.fitting.curves.synthetic import PUBLISHED_MULTI_POWER
from scaling.lr_schedule import lr_steps
from scaling.trainer.simulate import simulated_run
from scaling.trainer.spec import RunSpec

#: Tissue et al.-like annealing law at the same scale of loss.
ANNEALING_TRUTH = (3.04, 0.52, 0.51, 0.35)
WARMUP, PEAK, BATCH = 216, 3e-4, 1024
FIT_ON = {"constant_2400": ("constant", 2400, {}), "cosine_2400": ("cosine", 2400, {}),
          "wsd_2400": ("wsd", 2400, {"decay_fraction": 0.2}), "wsd_half_2400": ("wsd", 2400, {"decay_fraction": 0.5})}
HELD_OUT = {"constant_7200": ("constant", 7200, {}), "cosine_7200": ("cosine", 7200, {}),
            "wsd_sqrt_2400": ("wsd", 2400, {"decay_fraction": 0.2, "decay_shape": "1-sqrt"}),
            "wsd_30_2400": ("wsd", 2400, {"decay_fraction": 0.3})}


def curve_spec(form: str, kind: str, steps: int, extra: dict, *, noise: float, seed: int, evals: int = 60) -> RunSpec:
    """A simulated run of ``steps`` steps whose eval losses follow the curve law ``form``."""
    theta = PUBLISHED_MULTI_POWER if form == MULTI_POWER else ANNEALING_TRUTH
    names = ("L0", "A", "alpha", "B", "C", "beta", "gamma") if form == MULTI_POWER else ("L0", "A", "alpha", "C")
    return RunSpec.from_dict({
        "model": {"n_layer": 2, "d_model": 64, "n_head": 2, "context": 256}, "tokens": steps * BATCH,
        "batch_tokens": BATCH, "optimizer": {"lr": PEAK},
        "schedule": {"kind": kind, "warmup_steps": WARMUP, "min_lr_ratio": 0.1, **extra},
        "simulate": {"law": {"E": 0.0, "A": 1e-9, "B": 1.0, "alpha": 1.0, "beta": 1.0}, "noise": noise, "seed": seed,
                     "curve": {"form": form, **dict(zip(names, theta)), "evals": evals}},
    })


def simulated_curve(name: str, spec: RunSpec):
    rows, event, _ = simulated_run(spec, None)
    evals = [(s, v) for s, _, _, metric, v in rows if metric == vocab.EVAL_LOSS]
    steps, loss = (np.array(x) for x in zip(*evals))
    return run_curve(name, spec.model_dump(mode="json"), steps, loss), event[2]["expected_final_loss"]


def draw(form: str, seed: int, *, bootstrap: int, noise: float, choose: bool = False) -> dict:
    """One draw: the fitted law's held-out predictions against the truth."""
    fit = [simulated_curve(n, curve_spec(form, *v, noise=noise, seed=seed))[0] for n, v in FIT_ON.items()]
    law = CurveLaw(forms=(MULTI_POWER, ANNEALING) if choose else (form,), held_out=choose).fit(fit)
    if not choose:
        law.bootstrap(bootstrap, seed)
    out = {"chosen": law.form_, "covered": [], "error": []}
    if choose:
        return out
    for name, (kind, steps, extra) in HELD_OUT.items():
        spec = curve_spec(form, kind, steps, extra, noise=noise, seed=seed)
        lr = lr_steps(spec.steps, PEAK, spec.schedule)
        truth = simulated_curve(name, spec)[1]
        row = law.predict(Schedule(name, lr, np.array([spec.steps - 1]))).iloc[0]
        out["covered"].append(bool(row.lo <= truth <= row.hi))
        out["error"].append(abs(row.loss - truth))
    return out


def published_accuracy(seed: int) -> None:
    """Luo et al.'s test on curves drawn from their published 25M fit (see the module's docstring)."""
    from scaling.fitting.curves.synthetic import FIT_ON as PUBLISHED_FIT_ON, draw_curves

    curves = draw_curves(PUBLISHED_MULTI_POWER, noise=0.003, every=50, seed=seed)
    truth = {c.run: c.loss for c in draw_curves(PUBLISHED_MULTI_POWER, every=50, truth=True)}
    start = time.perf_counter()
    law = CurveLaw().fit([c for c in curves if c.run in PUBLISHED_FIT_ON])
    seconds = time.perf_counter() - start
    print(f"fit of 3 curves (both forms, each curve left out in turn): {seconds:.1f} s; chosen: {law.form_}")
    for form in law.forms:
        held = [c for c in curves if c.run not in PUBLISHED_FIT_ON]
        pred = [law.loss_at(c.lr, c.steps, form) for c in held]
        mae = np.mean([np.mean(np.abs(p - c.loss)) for p, c in zip(pred, held)])
        mre = np.mean([np.mean(np.abs(p - c.loss) / c.loss) for p, c in zip(pred, held)])
        true_mae = np.mean([np.mean(np.abs(p - truth[c.run])) for p, c in zip(pred, held)])
        print(f"  {form}: six held-out curves, MAE {mae:.4f} (noiseless curves: {true_mae:.4f}), "
              f"relative {100 * mre:.3f}%", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--draws", type=int, default=40)
    ap.add_argument("--bootstrap", type=int, default=60)
    ap.add_argument("--noise", type=float, default=0.001)
    ap.add_argument("--verbose", action="store_true", help="print each draw")
    ap.add_argument("--forms", nargs="+", default=[MULTI_POWER, ANNEALING], choices=[MULTI_POWER, ANNEALING])
    ap.add_argument("--choice-draws", type=int, default=10, help="draws in which both forms are fitted and one chosen")
    ap.add_argument("--published", action="store_true", help="accuracy on Luo et al.'s schedules instead")
    args = ap.parse_args()
    if args.published:
        for seed in range(3):
            published_accuracy(seed)
        return
    for form in args.forms:
        start = time.perf_counter()
        results = []
        for seed in range(args.draws):
            results.append(draw(form, seed, bootstrap=args.bootstrap, noise=args.noise))
            if args.verbose:
                print(f"  {form} draw {seed}: covered {results[-1]['covered']}", flush=True)
        covered = np.array([c for r in results for c in r["covered"]])
        errors = np.array([e for r in results for e in r["error"]])
        picks = [draw(form, seed, bootstrap=0, noise=args.noise, choose=True)["chosen"]
                 for seed in range(args.choice_draws)]
        chosen = f"true form chosen in {sum(p == form for p in picks)}/{len(picks)} draws, " if picks else ""
        print(f"{form}: coverage of 95% intervals {100 * covered.mean():.1f}% ({covered.sum()}/{covered.size} "
              f"held-out predictions, {args.draws} draws; goal >= 90%), mean absolute error {errors.mean():.5f}, "
              f"{chosen}{time.perf_counter() - start:.0f} s", flush=True)


if __name__ == "__main__":
    main()
