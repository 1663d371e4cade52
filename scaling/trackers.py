"""A sweep's runs exported to the trackers labs already use: MLflow, Weights & Biases (offline) and TensorBoard.

Each run of the sweep becomes one run of the tracker: its configuration (the run's spec, flattened
to dotted keys, with N, D, C and its shape), its curves (every metric at its step) and its final
metrics (final train and eval loss, status); the sweep's fitted laws become one more run,
``fitted-laws``: each law's parameters (value and 95% interval where the law is reliable, the
value alone where it is flagged) and the fit's text table. What a tracker shows is read from the
results database: nothing is fitted again where the sweep's fits are stored.

The libraries are the optional extra ``pip install 'scaling[export]'`` and are imported only here,
only when an export is asked for, so the torch-free layers never load them. Each export goes into
a new or empty folder, and a failed one removes what it wrote there.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from scaling.errors import UserError
from scaling.fmt import Interval

#: The name of the extra that installs the trackers' libraries.
EXTRA = "export"
#: The run that holds the sweep's fitted laws in every tracker.
LAWS_RUN = "fitted-laws"
#: The MLflow store's database file in an export's folder.
MLFLOW_DB = "mlflow.db"
#: How many MLflow metrics go in one logging call (its REST limit is 1,000).
MLFLOW_BATCH = 1000
#: The trackers, each with the library it needs.
TRACKERS = {"mlflow": "mlflow", "wandb": "wandb", "tensorboard": "tensorboardX"}


@dataclass
class RunRecord:
    """One run as the trackers see it."""

    key: str
    name: str
    status: str
    config: dict[str, Any]
    final: dict[str, float]
    #: (step, name, value) of every metric row, by step.
    curves: list[tuple[int, str, float]] = field(default_factory=list)


@dataclass
class SweepRecord:
    """A sweep's runs and its fitted laws, read once and written to any tracker."""

    sweep: str
    runs: list[RunRecord]
    #: law kind -> parameter -> {value, lo, hi} (lo and hi absent where the law is flagged unreliable).
    laws: dict[str, dict[str, dict[str, float]]]
    reliable: dict[str, bool]
    laws_text: str


@dataclass(frozen=True)
class Exported:
    """What an export wrote: the tracker, its folder and how many runs (the laws' run included)."""

    tracker: str
    folder: Path
    runs: int


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """A nested mapping as dotted keys ("optimizer.lr"); lists as JSON text, None left out."""
    out: dict[str, Any] = {}
    if isinstance(value, dict):
        for k, v in value.items():
            out.update(flatten(v, f"{prefix}{k}." if not isinstance(v, dict) or v else f"{prefix}{k}"))
        return {k.rstrip("."): v for k, v in out.items()}
    if value is None:
        return {}
    if isinstance(value, (list, tuple)):
        return {prefix: json.dumps(value, default=str)}
    return {prefix: value}


def collect(url: str, sweep: Optional[str] = None, *, run: Optional[str] = None, n_bootstrap: int = 200,
            seed: int = 0) -> SweepRecord:
    """The sweep's runs (only ``run``, a key or unique prefix, where given) and its fitted laws, from ``url``.

    The laws are the sweep's stored fits where its data are unchanged (fitted, not stored, otherwise).
    """
    from scaling.db import connect
    from scaling.db.jsonvalues import as_dict
    from scaling.fitting import fit_sweep
    from scaling.fitting.sweep_fit import KINDS

    with connect(url) as res:
        name = res.sweep_name(sweep)
        runs = res.runs(name)
        if run is not None:
            runs = runs[runs["run_key"].astype(str).str.startswith(run)]
            if len(runs) != 1:
                raise UserError(f"run {run!r}: {'no run' if runs.empty else f'{len(runs)} runs'} of sweep {name!r} "
                                "has that key or prefix")
        metrics = res.metrics(run_keys=list(runs["run_key"]), sweep=name)
    records = []
    for row in runs.to_dict("records"):
        spec = as_dict(row.get("spec")) or {}
        config = {**flatten(spec), "N": row.get("N"), "D": row.get("D"), "C": row.get("C"),
                  "n_layer": row.get("n_layer"), "d_model": row.get("d_model"), "n_head": row.get("n_head")}
        config = {k: v for k, v in config.items() if v is not None and not (isinstance(v, float) and math.isnan(v))}
        final = {name: float(row[k]) for name, k in (("train_loss", "final_train_loss"), ("eval_loss", "final_loss"))
                 if row.get(k) is not None and math.isfinite(float(row[k]))}
        mine = metrics[metrics["run_key"] == row["run_key"]]
        curves = [(int(s), str(n), float(v)) for s, n, v in zip(mine["step"], mine["name"], mine["value"])
                  if v is not None and math.isfinite(float(v))]
        key = str(row["run_key"])
        records.append(RunRecord(key, str(spec.get("name") or key), str(row["status"]), config, final, curves))
    from scaling.errors import FitError

    laws: dict[str, dict[str, dict[str, float]]] = {}
    reliable: dict[str, bool] = {}
    try:
        fit = fit_sweep(url, name, "all", n_bootstrap, seed, save=False, tasks=False)
    except FitError as exc:  # the runs are exported all the same; the laws' run says why it has none
        return SweepRecord(name, records, laws, reliable, f"no law fitted: {exc}")
    for kind, law in fit.laws.items():
        reliable[kind] = bool(law.reliable())
        laws[kind] = {p: _numbers(iv, reliable[kind]) for p, iv in law.reported_intervals().items()}
    text = fit.table() if fit.laws else "no law fitted: " + "; ".join(f"{KINDS[k][1]}: {w}" for k, w in fit.skipped.items())
    return SweepRecord(name, records, laws, reliable, text)


def _numbers(iv: Interval, reliable: bool) -> dict[str, float]:
    """A parameter as the trackers take it: its finite value, and its bounds where the law is reliable."""
    numbers = {"value": iv.value} | ({"lo": iv.lo, "hi": iv.hi} if reliable else {})
    return {q: float(v) for q, v in numbers.items() if v is not None and math.isfinite(float(v))}


def law_metrics(record: SweepRecord) -> dict[str, float]:
    """The fitted laws as flat numbers: ``law/<kind>/<parameter>`` and its ``_lo``/``_hi`` where reliable."""
    out: dict[str, float] = {}
    for kind, params in record.laws.items():
        out[f"law/{kind}/reliable"] = float(record.reliable[kind])
        for p, iv in params.items():
            for q, v in iv.items():
                out[f"law/{kind}/{p}" + ("" if q == "value" else f"_{q}")] = v
    return out


def _library(tracker: str) -> Any:
    """The tracker's library, or one line saying how to install it."""
    import importlib

    try:
        return importlib.import_module(TRACKERS[tracker])
    except ImportError:
        raise UserError(f"--{tracker} needs the {TRACKERS[tracker]} library: pip install 'scaling[{EXTRA}]'") from None


def check_folder(folder: Path, option: str) -> None:
    """Refuse a folder that is not new or empty (an export never mixes with or overwrites another), in one line."""
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise UserError(f"{option} {folder}: {'is not a folder' if not folder.is_dir() else 'is not empty'}; "
                        "give a new or empty folder")


def _into(folder: Path, tracker: str, write: Callable[[Path], int]) -> Exported:
    """Run ``write(folder)``; on any failure remove what it wrote (the folder was new or empty)."""
    check_folder(folder, f"--{tracker}")
    created = not folder.exists()
    folder.mkdir(parents=True, exist_ok=True)
    try:
        runs = write(folder.resolve())
    except BaseException:
        if created:
            shutil.rmtree(folder, ignore_errors=True)
        else:
            for child in folder.iterdir():
                shutil.rmtree(child, ignore_errors=True) if child.is_dir() else child.unlink(missing_ok=True)
        raise
    return Exported(tracker, folder.resolve(), runs)


def to_mlflow(record: SweepRecord, folder: Path) -> Exported:
    """A local MLflow store in ``folder``: ``mlflow.db`` (SQLite, MLflow's local default; its plain-file store is
    kept for old data only) and ``artifacts/`` (``mlflow ui --backend-store-uri sqlite:///FOLDER/mlflow.db``).
    One experiment named after the sweep, a run per run (params, tags, metrics by step) and the
    ``fitted-laws`` run with its table."""
    _library("mlflow")
    from mlflow.entities import Metric, Param
    from mlflow.tracking import MlflowClient

    def write(root: Path) -> int:
        client = MlflowClient(tracking_uri=f"sqlite:///{root / MLFLOW_DB}")
        experiment = client.create_experiment(record.sweep, artifact_location=(root / "artifacts").as_uri())
        for r in record.runs:
            run = client.create_run(experiment, run_name=r.name, tags={"scaling.run_key": r.key,
                                                                       "scaling.status": r.status})
            rid = run.info.run_id
            params = [Param(k, str(v)[:6000]) for k, v in sorted(r.config.items())]
            for i in range(0, len(params), 100):
                client.log_batch(rid, params=params[i:i + 100])
            metrics = [Metric(n, v, 0, s) for s, n, v in r.curves] + [Metric(f"final/{k}", v, 0, 0)
                                                                     for k, v in r.final.items()]
            for i in range(0, len(metrics), MLFLOW_BATCH):
                client.log_batch(rid, metrics=metrics[i:i + MLFLOW_BATCH])
            client.set_terminated(rid, "FINISHED" if r.status == "completed" else "FAILED")
        laws = client.create_run(experiment, run_name=LAWS_RUN, tags={"scaling.kind": "fitted laws"})
        client.log_batch(laws.info.run_id, metrics=[Metric(k, v, 0, 0) for k, v in law_metrics(record).items()])
        client.log_text(laws.info.run_id, record.laws_text, "fitted_laws.txt")
        client.log_dict(laws.info.run_id, {"laws": record.laws, "reliable": record.reliable}, "fitted_laws.json")
        client.set_terminated(laws.info.run_id, "FINISHED")
        return len(record.runs) + 1

    return _into(folder, "mlflow", write)


def to_wandb(record: SweepRecord, folder: Path) -> Exported:
    """Weights & Biases offline runs under ``folder/wandb`` (``wandb sync`` uploads them): a run per run
    (config, metrics by step, summary) and the ``fitted-laws`` run (the laws as its summary and a table)."""
    wandb = _library("wandb")

    def write(root: Path) -> int:
        settings = wandb.Settings(mode="offline", silent=True, console="off", x_disable_stats=True,
                                  x_disable_meta=True, x_disable_machine_info=True)
        for r in record.runs:
            run = wandb.init(project=record.sweep, dir=str(root), name=r.name, id=_wandb_id(r.key), config=r.config,
                             tags=[r.status], settings=settings, reinit="create_new")
            by_step: dict[int, dict[str, float]] = {}
            for s, n, v in r.curves:
                by_step.setdefault(s, {})[n] = v
            for s in sorted(by_step):
                run.log(by_step[s], step=s)
            run.summary.update({f"final/{k}": v for k, v in r.final.items()})
            run.finish(exit_code=0 if r.status == "completed" else 1)
        run = wandb.init(project=record.sweep, dir=str(root), name=LAWS_RUN, id=_wandb_id(LAWS_RUN),
                         config={"sweep": record.sweep}, settings=settings, reinit="create_new")
        run.summary.update(law_metrics(record))
        rows = [[kind, p, *(numbers.get(q) for q in ("value", "lo", "hi")), record.reliable[kind]]
                for kind, params in record.laws.items() for p, numbers in params.items()]
        run.log({"fitted_laws": wandb.Table(columns=["law", "parameter", "value", "lo", "hi", "reliable"], data=rows)})
        run.finish()
        return len(record.runs) + 1

    return _into(folder, "wandb", write)


def _wandb_id(key: str) -> str:
    """A W&B run id from a run key (letters, digits, dashes and underscores only)."""
    return "".join(c if c.isalnum() or c in "-_" else "-" for c in key)[:64]


def to_tensorboard(record: SweepRecord, folder: Path) -> Exported:
    """TensorBoard event files, one folder per run (``tensorboard --logdir FOLDER``): its curves as scalars by
    step, its configuration and final metrics as hyperparameters; ``fitted-laws/`` holds the laws."""
    tbx = _library("tensorboard")

    def write(root: Path) -> int:
        for r in record.runs:
            with tbx.SummaryWriter(logdir=str(root / _safe(r.key)), flush_secs=3600) as writer:
                for s, n, v in r.curves:
                    writer.add_scalar(n, v, global_step=s)
                hparams = {k: v if isinstance(v, (int, float, str, bool)) else str(v) for k, v in r.config.items()}
                writer.add_hparams(hparams, {f"final/{k}": v for k, v in r.final.items()}, name="hparams")
                writer.add_text("status", r.status)
        with tbx.SummaryWriter(logdir=str(root / LAWS_RUN), flush_secs=3600) as writer:
            for k, v in law_metrics(record).items():
                writer.add_scalar(k, v, global_step=0)
            writer.add_text("fitted_laws", "    " + record.laws_text.replace("\n", "\n    "))  # Markdown code block
        return len(record.runs) + 1

    return _into(folder, "tensorboard", write)


def _safe(key: str) -> str:
    """A run key as one folder name."""
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in key).lstrip(".") or "run"


#: Each tracker's writer.
WRITERS: dict[str, Callable[[SweepRecord, Path], Exported]] = {
    "mlflow": to_mlflow, "wandb": to_wandb, "tensorboard": to_tensorboard}


def export_sweep(url: str, folders: dict[str, Path], sweep: Optional[str] = None, *, run: Optional[str] = None,
                 n_bootstrap: int = 200, seed: int = 0) -> list[Exported]:
    """Export the sweep to every tracker in ``folders`` (tracker -> folder); each folder is checked (new or
    empty) and each library present before anything is read or written."""
    if not folders:
        raise UserError("name a tracker to export to: --mlflow DIR, --wandb DIR or --tensorboard DIR")
    unknown = set(folders) - set(WRITERS)
    if unknown:
        raise UserError(f"no tracker named {sorted(unknown)[0]!r}: give one of {', '.join(WRITERS)}")
    for tracker, folder in folders.items():
        check_folder(Path(folder).expanduser(), f"--{tracker}")
        _library(tracker)
    os.environ.setdefault("WANDB_SILENT", "true")
    for noisy in ("mlflow", "alembic"):  # their INFO lines about creating the store's tables
        logging.getLogger(noisy).setLevel(logging.WARNING)
    record = collect(url, sweep, run=run, n_bootstrap=n_bootstrap, seed=seed)
    return [WRITERS[t](record, Path(f).expanduser()) for t, f in folders.items()]
