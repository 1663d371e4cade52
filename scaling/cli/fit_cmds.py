"""`scaling fit` and `scaling recommend` (registered on the shared app)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional, Sequence

import typer

from scaling.cli.common import DbOption, FormatOption, SweepOption, app, check_format

if TYPE_CHECKING:
    from scaling.fitting import Analysis, SweepSource
    from scaling.fitting import CsvSource
    from scaling.fitting.moe.moe_fit import MoEFit

CsvOption = Annotated[
    Optional[Path],
    typer.Option("--csv", help="CSV of measurements (columns N|params|n_params|Model Size, D|tokens, "
                 "C|flops|compute|Training FLOP, loss; optional lr|learning_rate|lr_peak, "
                 "batch_tokens|batch_size_tokens|batch, beta2 and group, which make the runs of one (N, D) "
                 "that differ in them a hyperparameter group; run and tokens make rows a run's evaluations, "
                 "the one at tokens = D its final) instead of a sweep.", show_default=False),
]
#: The most bootstrap replicates a command takes (approach 3 refits every one: hours beyond this).
MAX_BOOTSTRAP = 10_000
BootOption = Annotated[int, typer.Option("--bootstrap", min=0, max=MAX_BOOTSTRAP,
                                         help="Bootstrap replicates for the intervals (0: none).")]
RecommendBootOption = Annotated[int, typer.Option("--bootstrap", min=2, max=MAX_BOOTSTRAP,
                                                  help="Bootstrap replicates for the intervals (the choice "
                                                  "between laws needs them).")]
SeedOption = Annotated[int, typer.Option("--seed", min=0, help="Seed of the bootstrap resampling.")]
FlopsOption = Annotated[str, typer.Option("--flops", help="CSV: FLOP convention: 6N (C = 6ND; a C column that "
                                          "disagrees is warned about) or given (C as in the file, k = median C/(ND)).")]
ParamsOption = Annotated[str, typer.Option("--params", help="CSV: what N counts: non_embedding or total parameters.")]
LossUnitsOption = Annotated[
    Optional[str], typer.Option("--loss-units", help="CSV: units of the loss column: nats (default), bits or "
                                "perplexity (converted to nats).", show_default=False)
]
DropInvalidOption = Annotated[
    bool, typer.Option("--drop-invalid", help="CSV: drop (and count) rows with a missing, unreadable, "
                       "non-positive or non-finite value instead of refusing the file.")
]
DropDuplicatesOption = Annotated[
    bool, typer.Option("--drop-duplicates", help="CSV: drop (and count) rows identical to an earlier row instead of "
                       "refusing the file (a copied row is not another run).")
]


def _csv_only(csv: Optional[Path], given: dict[str, bool]) -> None:
    """Refuse CSV reading options without --csv (a sweep carries its own conventions)."""
    from scaling.errors import UserError

    used = [name for name, on in given.items() if on]
    if csv is None and used:
        raise UserError(f"{', '.join(used)} only apply to --csv")


def _warn(warnings: Sequence[str]) -> None:
    """Warnings about the input (units, conventions, dropped rows), to stderr."""
    for warning in warnings:
        typer.echo(f"warning: {warning}", err=True)


def _r_star(text: str | None, default: float, option: str = "--r-star") -> tuple[float, bool]:
    """--r-star / --r-star-n: a positive number, or 'fit'."""
    from scaling.errors import UserError

    if text is None:
        return default, False
    if text.strip().lower() == "fit":
        return default, True
    try:
        value = float(text)
    except ValueError:
        raise UserError(f"{option} must be a positive number or 'fit', not {text!r}") from None
    if not (value > 0 and value < float("inf")):
        raise UserError(f"{option} must be a positive number or 'fit', not {text!r}")
    return value, False


def _not_moe(given: dict[str, bool]) -> None:
    """Refuse options of the dense laws with --law moe (its N is active parameters and C = 6 N_active D)."""
    from scaling.errors import UserError

    used = [name for name, on in given.items() if on]
    if used:
        raise UserError(f"{', '.join(used)} do not apply to the laws of sparsity (--law moe)")


def _check_emit_plan(emit_plan: Path, emit_runs: str, db: Optional[str], not_a_sweep_run: bool) -> None:
    """Refuse --emit-plan where there is no sweep's recommended run to plan, or where the plan cannot be written."""
    from scaling.db import resolve_url
    from scaling.errors import UserError
    from scaling.orchestrator.next_plan import KINDS, check_plan_output

    if emit_runs not in KINDS:
        raise UserError(f"--emit-runs {emit_runs}: give {' or '.join(KINDS)}")
    if not_a_sweep_run:
        raise UserError("--emit-plan plans a sweep's recommended run: it needs --sweep (a CSV has no plan), "
                        "without --inference-tokens, --target-loss or a law of sparsity")
    check_plan_output(emit_plan, resolve_url(db))


def _fit_moe_law(csv: Optional[Path], db: Optional[str], sweep: Optional[str], law: str, fmt: str, bootstrap: int,
                 seed: int, given: dict[str, bool]) -> None:
    """Print the laws of sparsity fitted to a CSV or a sweep; ``given``: which dense-law options were set (refused)."""
    check_format(fmt)
    _not_moe(given)
    moe_fit = _fit_moe(csv, db, sweep, law, bootstrap, seed)
    typer.echo(json.dumps(moe_fit.to_dict(), indent=2) if fmt == "json" else moe_fit.table(), nl=fmt == "json")


def _answer(analysis: "Analysis", source: "SweepSource | CsvSource", from_csv: bool, compute: Optional[float],
            inference_tokens: Optional[float], target_loss: Optional[float]) -> Any:
    """``scaling recommend``'s answer from the analysis: the inference optimum, a CSV's recommendation (no plan,
    so no concrete run), or a sweep's run sized by the plan stored with it; nothing is fitted again."""
    if inference_tokens is not None or target_loss is not None:
        from scaling.fitting.inference import recommend_inference

        return recommend_inference(analysis, inference_tokens or 0.0, compute=compute, target_loss=target_loss)
    if from_csv:
        from scaling.fitting import recommend as do_recommend

        return do_recommend(analysis, compute)
    from scaling.orchestrator.expand import sweep_recommendation

    return sweep_recommendation(source.url, analysis, compute)


def _one_source(csv: Optional[Path], sweep: Optional[str]) -> None:
    """Refuse a sweep given with a CSV."""
    from scaling.errors import UserError

    if csv is not None and sweep is not None:
        raise UserError("give either --sweep or --csv, not both")


def _fit_moe(csv: Optional[Path], db: Optional[str], sweep: Optional[str], law: str, bootstrap: int, seed: int) -> "MoEFit":
    """The laws of sparsity fitted to a CSV or a sweep's runs (scaling.fitting.moe)."""
    from scaling.errors import UserError
    from scaling.fitting.moe import moe_data
    from scaling.fitting.moe.moe_fit import MOE_CHOICES, fit_moe

    if law not in MOE_CHOICES:
        raise UserError(f"--law {law!r} is not a law of sparsity (use one of {', '.join(MOE_CHOICES)})")
    if csv is not None and sweep is not None:
        raise UserError("give either --sweep or --csv, not both")
    if bootstrap == 1:
        raise UserError("--bootstrap 1 gives no interval: give 0 (no intervals) or at least 2")
    if csv is not None:
        data = moe_data.from_csv(csv)
    else:
        from scaling.db import resolve_url

        data, _ = moe_data.from_db(resolve_url(db), sweep)
    return fit_moe(data, law, bootstrap, seed)


LawOption = Annotated[str, typer.Option("--law", help="kaplan, chinchilla (approaches 1-3) or all; or moe (the laws "
                                        "of sparsity: moe-granularity, moe-sparsity) for a mixture-of-experts sweep; "
                                        "or curve (loss curves in their learning-rate schedule: a CSV of run, step, "
                                        "lr, loss, or a sweep's eval curves; see docs/curves.md).")]
UniqueTokensOption = Annotated[
    Optional[float], typer.Option("--unique-tokens", help="CSV: the corpus's unique tokens U; fit on Muennighoff "
                                  "et al.'s effective data D' instead of D (repeated data). A U column gives "
                                  "U per row instead.", show_default=False)
]
RStarOption = Annotated[
    Optional[str], typer.Option("--r-star", help="CSV with U, or sweep with --effective-data: Muennighoff et al.'s "
                                "R*_D for D' (default 15.4), or 'fit' to estimate it with a 95% "
                                "profile-likelihood interval.", show_default=False)
]
RStarNOption = Annotated[
    Optional[str], typer.Option("--r-star-n", help="CSV with U, or sweep with --effective-data: model excess "
                                "parameters with Muennighoff et al.'s "
                                "R*_N (the paper's 5.3, or any positive number) for N', or 'fit' to estimate it "
                                "with a 95% profile-likelihood interval (default: not modelled, N' = N).",
                                show_default=False)
]
EffectiveDataOption = Annotated[
    bool, typer.Option("--effective-data", help="Sweep: fit on effective data D' using each run's "
                       "data.unique_tokens (with --r-star, --r-star-n as for a CSV).")
]
TaskOption = Annotated[
    Optional[list[str]], typer.Option("--task", help="Downstream tasks to fit (repeatable; default: every "
                                      "task the sweep evaluated or the CSV has columns for: task/<task>/acc, "
                                      "acc_<task>, bpb_<task>, err_<task>).", show_default=False)
]
Step1RecipeOption = Annotated[
    str, typer.Option("--step1-recipe", help="Downstream tasks: how step 1's Chinchilla form is searched: grid "
                      "(Epoch AI's grid of starts) or ladder (OLMo's model-ladder recipe: one start, every "
                      "parameter >= 0, L-BFGS-B; see docs/downstream.md).")
]
PredictOption = Annotated[
    Optional[Path], typer.Option("--predict", help="With --law curve: a CSV of schedules (run, step, lr; optional "
                                 "predict 0/1 marking the steps wanted, else every row): print the predicted loss "
                                 "with its 95% interval at each wanted step (--format json: a list of {run, step, "
                                 "loss, lo, hi}).", show_default=False)
]
HparamsModeOption = Annotated[
    str, typer.Option("--hparams", help="Runs in hyperparameter groups (one (N, D), several lr / batch / "
                      "beta2): fit the loss laws on each group's tuned loss L* (tuned) or on the run at the "
                      "centre of each group's grid (fixed).")
]


def _check_fit_options(fmt: str, hparams: str, bootstrap: int, csv: Optional[Path], sweep: Optional[str],
                       step1_recipe: str) -> None:
    """Refuse options that contradict each other or name nothing, before anything is read."""
    from scaling.errors import UserError
    from scaling.fitting.tasks.task_laws import STEP1_RECIPES

    check_format(fmt)
    if hparams not in ("tuned", "fixed"):
        raise UserError(f"--hparams must be tuned or fixed, not {hparams!r}")
    if bootstrap == 1:
        raise UserError("--bootstrap 1 gives no interval: give 0 (no intervals) or at least 2")
    if csv is not None and sweep is not None:
        raise UserError("give either --sweep or --csv, not both")
    if step1_recipe not in STEP1_RECIPES:
        raise UserError(f"--step1-recipe must be one of {', '.join(STEP1_RECIPES)}, not {step1_recipe!r}")


def _recommend_moe(csv: Optional[Path], db: Optional[str], sweep: Optional[str], law: str, bootstrap: int, seed: int,
                   compute: Optional[float], fmt: str, given: dict[str, bool]) -> None:
    """Print the laws of sparsity's recommendations at ``compute`` (and the laws that give none, with why);
    ``given``: which options of the dense laws were set (refused here)."""
    from scaling.errors import UserError
    from scaling.fitting.moe.moe_recommend import recommendations_table

    if not law.startswith("moe"):
        raise UserError(f"--law must be all or a law of sparsity (moe, moe-granularity, moe-sparsity), not {law!r}")
    _not_moe(given)
    recs, refused = _fit_moe(csv, db, sweep, law, bootstrap, seed).recommend(compute)
    typer.echo(json.dumps({"recommendations": [r.to_dict() for r in recs], "refused": refused}, indent=2)
               if fmt == "json" else recommendations_table(recs, refused), nl=fmt == "json")


@app.command()
def fit(
    db: DbOption = None,
    sweep: SweepOption = None,
    csv: CsvOption = None,
    law: LawOption = "all",
    fmt: FormatOption = "table",
    bootstrap: BootOption = 200,
    seed: SeedOption = 0,
    flops: FlopsOption = "6N",
    params: ParamsOption = "non_embedding",
    loss_units: LossUnitsOption = None,
    drop_invalid: DropInvalidOption = False,
    drop_duplicates: DropDuplicatesOption = False,
    unique_tokens: UniqueTokensOption = None,
    r_star: RStarOption = None,
    r_star_n: RStarNOption = None,
    effective_data: EffectiveDataOption = False,
    task: TaskOption = None,
    step1_recipe: Step1RecipeOption = "grid",
    hparams: HparamsModeOption = "tuned",
    predict: PredictOption = None,
) -> None:
    """Fit power laws and print every parameter with its 95% interval.

    From a sweep the fits are stored (fits table, with the data's fingerprint) and reused while
    the data are unchanged. Examples: `scaling fit`, `scaling fit --csv points.csv --law chinchilla`.
    Warnings about the input (units, conventions, dropped rows) go to stderr as well.
    """
    from scaling.errors import UserError
    from scaling.fitting import Settings, analyse, source_of
    from scaling.fitting.core.measurements import R_STAR_DATA
    from scaling.fitting.loss.effective import R_STAR_N

    if predict is not None or law == "curve":
        _fit_curves(db, sweep, csv, predict, fmt, bootstrap, seed, law)
        return
    if law.startswith("moe"):
        _fit_moe_law(csv, db, sweep, law, fmt, bootstrap, seed, {
            "--flops": flops != "6N", "--params": params != "non_embedding", "--loss-units": loss_units is not None,
            "--drop-invalid": drop_invalid, "--drop-duplicates": drop_duplicates, "--unique-tokens":
            unique_tokens is not None, "--r-star": r_star is not None, "--r-star-n": r_star_n is not None,
            "--effective-data": effective_data, "--task": bool(task), "--hparams": hparams != "tuned",
            "--step1-recipe": step1_recipe != "grid"})
        return
    _check_fit_options(fmt, hparams, bootstrap, csv, sweep, step1_recipe)
    _csv_only(csv, {"--params": params != "non_embedding", "--loss-units": loss_units is not None,
                    "--drop-invalid": drop_invalid, "--drop-duplicates": drop_duplicates,
                    "--unique-tokens": unique_tokens is not None})
    fixed_r, fit_r = _r_star(r_star, R_STAR_DATA)
    fixed_rn, fit_rn = _r_star(r_star_n, R_STAR_N, "--r-star-n")
    if csv is not None and effective_data:
        raise UserError("--effective-data applies to a sweep; a CSV gives U as a column or --unique-tokens")
    if csv is None and (r_star is not None or r_star_n is not None) and not effective_data:
        raise UserError("--r-star and --r-star-n on a sweep need --effective-data (the runs' unique tokens)")
    settings = Settings(law=law, n_bootstrap=bootstrap, seed=seed, effective_data=effective_data,
                        r_star=fixed_r, fit_r_star=fit_r, r_star_n=fixed_rn if r_star_n is not None else None,
                        fit_r_star_n=fit_rn, hparams=hparams, tasks=tuple(task) if task else True,
                        task_recipe=step1_recipe)
    reading = dict(flops_convention=flops, params_convention=params, loss_units=loss_units, drop_invalid=drop_invalid,
                   drop_duplicates=drop_duplicates, unique_tokens=unique_tokens)
    source: Any = source_of(db, sweep, csv, **(reading if csv is not None else {}))
    analysis = analyse(source, settings)
    _warn(analysis.warnings if csv is not None else ())
    if fmt == "json":
        typer.echo(json.dumps(analysis.to_dict(), indent=2))
    else:
        typer.echo(analysis.table(), nl=False)


def _fit_curves(db: Optional[str], sweep: Optional[str], csv: Optional[Path], predict: Optional[Path], fmt: str,
                bootstrap: int, seed: int, law_name: str) -> None:
    """`scaling fit --law curve`: the curve law of a CSV or a sweep, or its predictions of --predict's schedules."""
    from scaling.errors import UserError

    check_format(fmt)
    if law_name != "curve":
        raise UserError("--predict applies to --law curve")
    _one_source(csv, sweep)
    from scaling.fitting.curves.data import schedules_from_csv
    from scaling.fitting.curves.output import curve_law, predictions_json, predictions_text

    wanted = schedules_from_csv(predict) if predict is not None else None  # refused before any fit
    if csv is not None:
        law = curve_law(csv=csv, bootstrap=bootstrap, seed=seed, schedules=wanted)
    else:
        from scaling.db import resolve_url

        law = curve_law(url=resolve_url(db), sweep=sweep, bootstrap=bootstrap, seed=seed, schedules=wanted)
    if wanted is None:
        typer.echo(json.dumps(law.to_dict(), indent=2) if fmt == "json" else law.table(), nl=fmt == "json")
        return
    table = law.predict(wanted)
    if fmt == "json":
        for note in law.notes_:
            typer.echo(f"warning: {note}", err=True)
        typer.echo(predictions_json(table))
    else:
        typer.echo(predictions_text(table, law), nl=False)


@app.command()
def recommend(
    compute: Annotated[
        Optional[float], typer.Option("--compute", help="Target budget in FLOPs (default: 10x the largest run).",
                                      show_default=False)
    ] = None,
    db: DbOption = None,
    sweep: SweepOption = None,
    csv: CsvOption = None,
    fmt: FormatOption = "table",
    law: Annotated[str, typer.Option("--law", help="all (the dense laws), or moe (moe-granularity, moe-sparsity): "
                                     "the compute-optimal mixture of experts against the dense optimum.")] = "all",
    bootstrap: RecommendBootOption = 200,
    seed: SeedOption = 0,
    inference_tokens: Annotated[
        Optional[float], typer.Option("--inference-tokens", help="Tokens the model will serve: minimise training "
                                      "plus inference FLOPs at the compute-optimal loss (approach 3).",
                                      show_default=False)
    ] = None,
    target_loss: Annotated[
        Optional[float], typer.Option("--target-loss", help="With --inference-tokens (default 0): the cheapest "
                                      "(N, D) reaching this loss.", show_default=False)
    ] = None,
    flops: FlopsOption = "6N",
    params: ParamsOption = "non_embedding",
    loss_units: LossUnitsOption = None,
    drop_invalid: DropInvalidOption = False,
    drop_duplicates: DropDuplicatesOption = False,
    emit_plan: Annotated[
        Optional[Path], typer.Option("--emit-plan", help="Also write the answer as a plan `scaling plan` and "
                                     "`scaling sweep` accept (built on the sweep's stored plan).", show_default=False)
    ] = None,
    emit_runs: Annotated[
        str, typer.Option("--emit-runs", help="What --emit-plan plans: `run` (the recommended run) or `narrow` (the "
                          "runs that would narrow approach 3's interval on N* most).")
    ] = "run",
) -> None:
    """The compute-optimal run at a budget: N*, D*, loss with intervals from every method.

    With a sweep, also a concrete shape, hyperparameters and memory from the plan, and the
    extra runs that would narrow the interval on N* most; `--emit-plan next.yaml` writes that run
    as the next plan. Example: `scaling recommend --compute 1e21 --emit-plan next.yaml`.
    """
    check_format(fmt)
    if emit_plan is not None:  # refused before any fit
        _check_emit_plan(emit_plan, emit_runs, db,
                         csv is not None or inference_tokens is not None or target_loss is not None or law != "all")
    if law != "all":
        _recommend_moe(csv, db, sweep, law, bootstrap, seed, compute, fmt, {
            "--flops": flops != "6N", "--params": params != "non_embedding", "--loss-units": loss_units is not None,
            "--drop-invalid": drop_invalid, "--drop-duplicates": drop_duplicates,
            "--inference-tokens": inference_tokens is not None, "--target-loss": target_loss is not None})
        return
    _one_source(csv, sweep)
    _csv_only(csv, {"--flops": flops != "6N", "--params": params != "non_embedding",
                    "--loss-units": loss_units is not None, "--drop-invalid": drop_invalid,
                    "--drop-duplicates": drop_duplicates})
    from scaling.fitting import Settings, analyse, source_of

    reading = dict(flops_convention=flops, params_convention=params, loss_units=loss_units, drop_invalid=drop_invalid,
                   drop_duplicates=drop_duplicates)
    source: Any = source_of(db, sweep, csv, **(reading if csv is not None else {}))
    inference = inference_tokens is not None or target_loss is not None  # scaling.fitting.inference
    if inference:  # what no fit can answer is refused before the fit
        from scaling.fitting.inference import check_request

        check_request(inference_tokens or 0.0, compute=compute, target_loss=target_loss)
    analysis = analyse(source, Settings(n_bootstrap=bootstrap, seed=seed))  # a sweep's stored one, else made
    _warn(analysis.warnings if csv is not None else ())
    rec = _answer(analysis, source, csv is not None, compute, inference_tokens, target_loss)
    if emit_plan is not None:  # a sweep's (checked above); before the answer is printed: a refusal is one line
        from scaling.orchestrator.next_plan import write_sweep_plan

        written = write_sweep_plan(source.url, analysis.sweep, rec, emit_plan, emit_runs)
    typer.echo(json.dumps(rec.to_dict(), indent=2) if fmt == "json" else rec.table(), nl=fmt == "json")
    if emit_plan is not None and fmt != "json":
        typer.echo(f"next plan: {written} (check it with `scaling plan {written}`)")
