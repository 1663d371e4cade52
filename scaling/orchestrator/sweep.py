"""`scaling sweep`: load and expand a plan, register its runs, train them on Ray, fit, report.

The plan is validated and expanded completely, and the runs folder proved writable, before the
database is touched, so a bad plan or folder writes nothing. By default a private local Ray is
started (``address="local"`` with an explicit CPU count, so a sweep never joins a stranger's
cluster); ``--address`` joins a cluster, whose other nodes must reach the database: a SQLite
file is refused there.
"""

from __future__ import annotations

import os
import signal
import socket
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, NamedTuple, Optional

from scaling import vocab
from scaling.db.engine import is_sqlite, refuse_in_memory, sqlite_path
from scaling.db.lifecycle import Lifecycle
from scaling.errors import DatabaseError, ResourceError, UserError, mask_data, mask_url
from scaling.orchestrator.expand import Expansion, expand
from scaling.orchestrator.next_plan import run_plan_text
from scaling.orchestrator.orphans import reap_orphaned_agents, start_watchdog
from scaling.orchestrator.plan import Plan, load_plan
from scaling.orchestrator.scheduler import Scheduler, SweepOutcome, capacity_error
from scaling.orchestrator.signals import deferred_interrupts, uninterrupted
from scaling.trainer.checkpoints.rundir import checked_folder, owner_problem

if TYPE_CHECKING:  # pragma: no cover - names for type hints only
    from scaling.db import Store
    from types import FrameType

    from scaling.fitting.analysis import Analysis
    from scaling.fitting.recommend import Recommendation
    from scaling.orchestrator.adaptive import AdaptiveOutcome
    from scaling.orchestrator.display import SweepDisplay

#: Object store of the local Ray: runs exchange only small results, so keep it small.
LOCAL_OBJECT_STORE_BYTES = 150 * 1024**2


@dataclass
class SweepResult:
    sweep: str
    url: str
    outcome: Optional[SweepOutcome]
    dry_run: bool = False
    would_run: Optional[list[str]] = None
    fit: Any = None
    report_path: Optional[str] = None
    notes: Optional[list[str]] = None
    adaptive: Any = None  # an adaptive plan's AdaptiveOutcome (scaling.orchestrator.adaptive)


def start_ray(address: Optional[str], num_cpus: Optional[int]) -> bool:
    """Start a private local Ray, or join the cluster at ``address``; False if Ray was already up.

    The caller shuts down only a Ray this returned True for, so a notebook or a test session can
    share one Ray across sweeps.
    """
    # Ray Train v2 blocks every report ~2 s unless its health check polls faster.
    os.environ.setdefault("RAY_TRAIN_HEALTH_CHECK_INTERVAL_S", "0.1")
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    import ray

    if ray.is_initialized():
        return False
    if address:
        try:
            ray.init(address=address, log_to_driver=False, logging_level="WARNING")
        except (ConnectionError, ValueError, RuntimeError) as e:
            raise ResourceError(f"--address {address}: cannot join a Ray cluster there ({e})") from None
    else:
        reap_orphaned_agents()  # a local Ray of a killed sweep must not outlive it
        ray.init(
            address="local",
            num_cpus=num_cpus or os.cpu_count() or 1,
            object_store_memory=LOCAL_OBJECT_STORE_BYTES,
            include_dashboard=False,
            log_to_driver=False,
            logging_level="WARNING",
        )
        start_watchdog()  # nor outlive this sweep if it is killed
    return True


def check_local_cpus(expansion: Expansion, num_cpus: Optional[int]) -> None:
    """Refuse, before anything is registered, a run that needs more CPUs than the local Ray will have.

    A cluster's capacity is known only once joined; the scheduler checks it there.
    """
    cpus = float(num_cpus or os.cpu_count() or 1)
    for run in expansion.runs:
        too_big = capacity_error(run, cpus, where=f"the local Ray (resources.num_cpus: {num_cpus})" if num_cpus
                                 else "this machine")
        if too_big:
            raise ResourceError(too_big)


def check_address(address: str, timeout_s: float = 10.0) -> None:
    """Refuse an ``--address`` that is not a reachable ``host:port`` before Ray waits on it for good.

    ``auto`` (a cluster started on this machine with ``ray start``) is left to Ray. Ray Client
    addresses (``ray://``) are refused: the sweep runs its driver on a cluster node's network.
    """
    if address == "auto":
        return
    if "://" in address:
        raise ResourceError(f"--address {address}: give the cluster's GCS address as host:port (e.g. 10.0.0.1:6379), "
                            "not a URL (Ray Client, ray://, is not supported)")
    host, sep, port = address.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ResourceError(f"--address {address!r} is not host:port (e.g. 10.0.0.1:6379), or auto")
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as e:
        raise ResourceError(f"--address {address}: no Ray cluster answers there "
                            f"({e.strerror or type(e).__name__})") from None


def registered_status(url: str, sweep: str, expansion: Optional[Expansion] = None) -> dict[str, str]:
    """Status of each run the database already holds for ``sweep`` (empty if no database yet).

    With ``expansion``, its new runs are checked as registering them would be (a point the sweep
    holds under another key is refused), so a dry run says what the sweep would.
    """
    path = sqlite_path(url)
    if is_sqlite(url) and (path is None or not path.is_file() or path.stat().st_size == 0):
        return {}  # no database yet (no file, or an empty one the sweep would fill): nothing is registered
    from scaling.db import connect

    with connect(url) as results:  # a database it cannot read is refused, as the sweep itself would
        if sweep not in set(results.sweeps()["sweep"]):  # (reads every table: damage shows here)
            return {}  # a sweep not registered yet
        runs = results.runs(sweep=sweep)
        if expansion is not None:
            held = set(runs["run_key"])
            results.check_points(sweep, [r.spec.record() for r in expansion.runs if r.key not in held])
    return dict(zip(runs["run_key"], runs["status"])) if len(runs) else {}


def run_sweep(
    plan: str | Path | Plan,
    *,
    db: Optional[str] = None,
    address: Optional[str] = None,
    max_concurrent: Optional[int] = None,
    dry_run: bool = False,
    fit: bool = True,
    report: bool = True,
    stale_after_s: float = 60.0,
    heartbeat_s: float = 5.0,
    display: Optional[SweepDisplay] = None,
    echo: Callable[[str], None] = print,
    refresh_transfer: bool = False,
) -> SweepResult:
    """Train every run of the plan (a `Plan` or a plan file) not completed yet; see the module docstring."""
    from scaling.db import resolve_url

    plan, source = (plan, None) if isinstance(plan, Plan) else load_plan(plan)
    expansion = expand(plan, source, db=db, refresh_transfer=refresh_transfer)
    url = resolve_url(cli=db, plan=plan.db)
    check_where(url, address, expansion)
    for note in expansion.notes:
        echo(f"note: {note}")
    if dry_run:
        check_run_folders(Path(plan.runs_dir) / plan.name, expansion, url)
        status = registered_status(url, plan.name, expansion)
        todo = [r.key for r in expansion.runs if status.get(r.key) != vocab.COMPLETED]
        return SweepResult(plan.name, url, None, dry_run=True, would_run=todo, notes=expansion.notes)

    from scaling.db import Store

    with checked_folder(Path(plan.runs_dir) / plan.name, "runs_dir") as folder:  # a refusal below leaves no folder
        check_run_folders(folder, expansion, url)
        if address:
            check_address(address)  # before anything is registered: a cluster it cannot reach writes nothing
        store = Store(url)
        register(store, plan, expansion, replace_plan=refresh_transfer)

    def schedule(runs: list[Any]) -> SweepOutcome:
        return Scheduler(
            runs,
            store,
            url,
            plan.name,
            plan.runs_dir,
            retries=plan.retries,
            max_concurrent=max_concurrent or plan.resources.max_concurrent,
            heartbeat_s=heartbeat_s,
            stale_after_s=stale_after_s,
            on_update=display.update if display is not None else None,
        ).run()

    outcome, adaptive = train_on_ray(expansion, schedule, url=url, store=store, address=address, echo=echo)
    result = SweepResult(plan.name, url, outcome, notes=expansion.notes, adaptive=adaptive)
    analyse_and_report(result, plan, fit=fit, report=report, echo=echo)
    return result


def analyse_and_report(result: SweepResult, plan: Plan, *, fit: bool, report: bool, echo: Callable[[str], None]) -> None:
    """After the runs: the sweep's analysis, once (``result.fit``), and the report of it, whose headline is
    the analysis' recommendation sized by the plan, the closing answer's run; a user error is a note."""
    url = result.url
    if fit:
        from scaling.fitting import SweepSource, analyse

        result.fit = _as_note(echo, "fit", analyse, SweepSource(url, plan.name))
    if report:
        from scaling.fitting import Analysis
        from scaling.reports import write_report

        path = report_path(url, plan)
        analysis = result.fit if isinstance(result.fit, Analysis) else None  # the report shows this analysis
        sized = _as_note(echo, "report", sized_recommendation, url, analysis)  # the closing answer's run
        sized = None if sized is _SKIPPED else sized
        if _as_note(echo, "report", partial(write_report, analysis=analysis, recommendation=sized,
                                            next_plan=run_plan_text(url, plan.name, sized)), url, plan.name,
                    str(path)) is not _SKIPPED:
            result.report_path = str(path)


def check_where(url: str, address: Optional[str], expansion: Expansion) -> None:
    """Refuse a database the sweep's workers cannot share (in memory; SQLite on a cluster), or a local
    Ray with too few CPUs for one run."""
    refuse_in_memory(url)
    if address and is_sqlite(url):
        raise DatabaseError(
            f"--address joins a Ray cluster whose other nodes cannot reach the SQLite file of "
            f"{mask_url(url)!r}; use a database server (postgresql+psycopg://...) with --db or the plan's db:"
        )
    if not address:
        check_local_cpus(expansion, expansion.plan.resources.num_cpus)


def train_on_ray(expansion: Expansion, schedule: Callable[[list[Any]], SweepOutcome], *, url: str, store: Store,
                 address: Optional[str], echo: Callable[[str], None]) -> tuple[SweepOutcome, Optional[AdaptiveOutcome]]:
    """The expansion's runs trained by ``schedule`` on Ray (started here unless ``address`` names one),
    or the adaptive loop's rounds: (the outcome, the adaptive outcome or None). SIGTERM stops cleanly,
    like Ctrl-C; a Ray started here is shut down whatever happens."""
    plan = expansion.plan
    adaptive = None
    previous = signal.getsignal(signal.SIGTERM)

    def _terminate(signum: int, frame: Optional[FrameType]) -> None:  # SIGTERM stops cleanly, like Ctrl-C
        raise KeyboardInterrupt

    started_ray = False
    try:
        with deferred_interrupts():  # Ray fully up (and shut down below) or not started: never half-way
            started_ray = start_ray(address, plan.resources.num_cpus)
        signal.signal(signal.SIGTERM, _terminate)
        if plan.adaptive is not None:
            from scaling.orchestrator.adaptive import run_adaptive

            adaptive = run_adaptive(plan, expansion.runs, url=url, store=store, echo=echo, train=schedule,
                                    register=lambda runs: register(store, plan, Expansion(plan, runs)))
            outcome = adaptive.outcome
        else:
            outcome = schedule(expansion.runs)
    finally:
        with uninterrupted():  # Ray's shutdown, too, finishes whatever Ctrl-C comes next
            signal.signal(signal.SIGTERM, previous)
            if started_ray:  # a Ray the caller started stays up for its next sweep
                import ray

                ray.shutdown()
    return outcome, adaptive


def sized_recommendation(url: str, analysis: Optional[Analysis]) -> Optional[Recommendation]:
    """The analysis' recommendation with its run sized by the sweep's stored plan (None without one)."""
    from scaling.orchestrator.expand import sweep_recommendation

    if analysis is None or analysis.recommendation is None:
        return None
    return sweep_recommendation(url, analysis)


class ReportInputs(NamedTuple):
    """What a sweep's report is handed (``write_report(url, sweep, path, **inputs._asdict())``)."""

    analysis: Optional[Analysis] = None
    recommendation: Optional[Recommendation] = None  # sized by the stored plan: the closing answer's run
    next_plan: Optional[str] = None  # the plan that trains that run (YAML), where a reliable law recommends it


def report_inputs(url: str, sweep: Optional[str], *, save: bool = False) -> ReportInputs:
    """What a sweep's report shows, as the end of ``scaling sweep`` hands it: the stored analysis of the sweep's
    unchanged data (else one made, stored only with ``save``), its recommendation sized by the stored plan and
    the plan that trains it; nothing where the sweep cannot be analysed (the report then says why)."""
    from scaling.fitting import SweepSource, analyse

    try:
        analysis = analyse(SweepSource(url, sweep), save=save)
        sized = sized_recommendation(url, analysis)
    except UserError:
        return ReportInputs()
    return ReportInputs(analysis, sized, run_plan_text(url, analysis.sweep, sized))


def check_run_folders(folder: Path, expansion: Expansion, url: str) -> None:
    """Refuse, before registering, a run whose folder holds checkpoints recorded into another database."""
    if expansion.plan.simulate is not None:
        return  # simulated runs write no checkpoints to resume from
    for run in expansion.runs:
        problem = owner_problem(folder / run.key, url)
        if problem:
            raise DatabaseError(problem)


def register(store: Store, plan: Plan, expansion: Expansion, replace_plan: bool = False) -> list[str]:
    """Register the sweep (with its plan and conventions) and its runs; returns the new keys.
    ``replace_plan``: the stored plan becomes this one (a transferred law refitted on request)."""
    return Lifecycle(store, plan.name).register(
        [r.spec.record() for r in expansion.runs],
        # the plan's db: URL may hold a password; its vocabulary (a tokenizer's) and rules (a fitted
        # law written out) as trained
        plan=mask_data(plan.model_copy(update={"model": expansion.plan.model, "rules": expansion.plan.rules})
                       .model_dump(mode="json")),
        params_convention=plan.conventions.params,
        flops_convention=plan.conventions.flops,
        one_per_point=True,
        replace_plan=replace_plan,
    )


def report_path(url: str, plan: Plan) -> Path:
    """Beside the SQLite file, else in the plan's runs_dir."""
    db_file = sqlite_path(url)
    if db_file is not None:
        return db_file.parent / f"{plan.name}-report.html"
    return Path(plan.runs_dir).resolve() / f"{plan.name}-report.html"


_SKIPPED = object()


def _as_note(echo: Callable[[str], None], what: str, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)``; a user error (e.g. too few completed runs to fit) is a note: the sweep itself succeeded."""
    try:
        return fn(*args)
    except UserError as exc:
        echo(f"note: {what}: {exc}")
        return _SKIPPED
