"""Coverage of the curve law's 95% intervals on held-out schedules, curves drawn by the simulated trainer.

Each draw simulates (`scaling.trainer.simulate.simulated_run`, no database) runs of one size whose eval
losses follow a known curve law in their learning-rate schedules (``simulate.curve``: the
multi-power law with Luo et al.'s published 25M parameters, or Tissue et al.'s annealing law),
with log-normal noise of SD ``--noise`` per evaluation, 60 evaluations per run. The law is fitted (in
its true form, with each curve left out in turn for its model error) to three runs after a 216-step
warmup to 3e-4, a tenth of Luo et al.'s lengths: ``--design published`` (their design) a constant and a
cosine of 2,400 steps and a two-stage run of 1,600 steps dropping to 0.3 x peak at step 800;
``--design wsd`` the constant, the cosine and a WSD decaying over the last 20% instead (a design
without a step drop). It is bootstrapped (``--bootstrap`` replicates over whole curves) and predicts the
final loss of five held-out runs (Luo et al.'s held-out kinds): constant and cosine of 7,200 steps (three
times longer), WSD over the last 20% with exponential and with linear decay, and a two-stage run
dropping to 0.1 x peak. A draw covers a run when the noiseless final loss lies inside the prediction's
95% interval: the interval the law gives (the bootstrap's with the law's model error added) and, for
comparison, the bootstrap's alone.

Prints, per form: the coverage of each interval over all held-out predictions with its binomial SE
and an SE over draws (the predictions of one draw share a fit), the coverage per held-out kind, the
mean absolute error, and the share of draws in which the automatic choice between the forms picked
the true one (goal: >= 90% coverage).

    python benchmarks/bench_curve_coverage.py [--draws 100] [--bootstrap 40] [--noise 0.001] [--design published]

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
TWO_STAGE = {"drop_at": 0.5, "drop_lr_ratio": 0.3}
#: The three fitted runs of each design (name: kind, steps, schedule fields).
DESIGNS = {
    "published": {"constant_2400": ("constant", 2400, {}), "cosine_2400": ("cosine", 2400, {}),
                  "two_stage_1600": ("two_stage", 1600, TWO_STAGE)},
    "wsd": {"constant_2400": ("constant", 2400, {}), "cosine_2400": ("cosine", 2400, {}),
            "wsd_2400": ("wsd", 2400, {"decay_fraction": 0.2})},
}
HELD_OUT = {"constant_7200": ("constant", 7200, {}), "cosine_7200": ("cosine", 7200, {}),
            "wsd_exponential_2400": ("wsd", 2400, {"decay_fraction": 0.2, "decay_shape": "exponential"}),
            "wsd_linear_2400": ("wsd", 2400, {"decay_fraction": 0.2}),
            "two_stage_0.1_1600": ("two_stage", 1600, {"drop_at": 0.5, "drop_lr_ratio": 0.1})}

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
    rows, events, _ = simulated_run(spec, None)
    evals = [(s, v) for s, _, _, metric, v in rows if metric == vocab.EVAL_LOSS]
    steps, loss = (np.array(x) for x in zip(*evals))
    return run_curve(name, spec.model_dump(mode="json"), steps, loss), events[0][2]["expected_final_loss"]


def draw(form: str, seed: int, *, bootstrap: int, noise: float, design: str = "published", choose: bool = False) -> dict:
    """One draw: the fitted law's held-out predictions against the truth."""
    fit = [simulated_curve(n, curve_spec(form, *v, noise=noise, seed=seed))[0] for n, v in DESIGNS[design].items()]
    law = CurveLaw(forms=(MULTI_POWER, ANNEALING) if choose else (form,)).fit(fit)
    out: dict = {"chosen": law.form_, "covered": [], "covered_bootstrap": [], "error": [],
                 "model_error": law.model_error()}
    if choose:
        return out
    law.bootstrap(bootstrap, seed)
    for name, (kind, steps, extra) in HELD_OUT.items():
        spec = curve_spec(form, kind, steps, extra, noise=noise, seed=seed)
        at = Schedule(name, lr_steps(spec.steps, PEAK, spec.schedule), np.array([spec.steps - 1]))
        truth = simulated_curve(name, spec)[1]
        row = law.predict(at).iloc[0]
        alone = law.predict(at, model_error=False).iloc[0]
        out["covered"].append(bool(row.lo <= truth <= row.hi))
        out["covered_bootstrap"].append(bool(alone.lo <= truth <= alone.hi))
        out["error"].append(abs(row.loss - truth))
    return out


def coverage_line(label: str, covered: np.ndarray) -> str:
    """Coverage over draws x held-out runs, its binomial SE and its SE over draws (a draw's runs share a fit)."""
    p = covered.mean()
    binomial = np.sqrt(p * (1 - p) / covered.size)
    over_draws = covered.mean(axis=1).std(ddof=1) / np.sqrt(covered.shape[0]) if covered.shape[0] > 1 else np.nan
    return (f"{label} {100 * p:.1f}% ({covered.sum()}/{covered.size}; binomial SE {100 * binomial:.1f} points, "
            f"SE over draws {100 * over_draws:.1f})")


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
    ap.add_argument("--draws", type=int, default=100)
    ap.add_argument("--bootstrap", type=int, default=40)
    ap.add_argument("--noise", type=float, default=0.001)
    ap.add_argument("--design", choices=list(DESIGNS), default="published", help="the three schedules fitted")
    ap.add_argument("--verbose", action="store_true", help="print each draw")
    ap.add_argument("--forms", nargs="+", default=[MULTI_POWER, ANNEALING], choices=[MULTI_POWER, ANNEALING])
    ap.add_argument("--choice-draws", type=int, default=10, help="draws in which both forms are fitted and one chosen")
    ap.add_argument("--published", action="store_true", help="accuracy on Luo et al.'s schedules instead")
    args = ap.parse_args()
    if args.published:
        for seed in range(3):
            published_accuracy(seed)
        return
    print(f"design {args.design}: fitted on {', '.join(DESIGNS[args.design])}; {args.draws} draws, "
          f"{args.bootstrap} bootstrap replicates, noise {args.noise}")
    for form in args.forms:
        start = time.perf_counter()
        results = []
        for seed in range(args.draws):
            results.append(draw(form, seed, bootstrap=args.bootstrap, noise=args.noise, design=args.design))
            if args.verbose:
                print(f"  {form} draw {seed}: covered {results[-1]['covered']}, bootstrap alone "
                      f"{results[-1]['covered_bootstrap']}, model error {100 * results[-1]['model_error']:.3f}%",
                      flush=True)
        covered = np.array([r["covered"] for r in results])
        alone = np.array([r["covered_bootstrap"] for r in results])
        errors = np.array([e for r in results for e in r["error"]])
        picks = [draw(form, seed, bootstrap=0, noise=args.noise, design=args.design, choose=True)["chosen"]
                 for seed in range(args.choice_draws)]
        print(f"{form}: {coverage_line('coverage of 95% intervals', covered)}; goal >= 90%", flush=True)
        print(f"  {coverage_line('the bootstrap alone (no model error)', alone)}")
        print("  by held-out run: " + ", ".join(f"{n} {100 * covered[:, i].mean():.0f}% "
                                               f"(alone {100 * alone[:, i].mean():.0f}%)"
                                               for i, n in enumerate(HELD_OUT)))
        model = np.array([r["model_error"] for r in results])
        print(f"  model error (SD, log): median {100 * np.nanmedian(model):.3f}%, zero in "
              f"{int(np.sum(model == 0))}/{model.size} draws; mean absolute error {errors.mean():.5f}; "
              + (f"true form chosen in {sum(p == form for p in picks)}/{len(picks)} draws; " if picks else "")
              + f"{time.perf_counter() - start:.0f} s", flush=True)


if __name__ == "__main__":
    main()
