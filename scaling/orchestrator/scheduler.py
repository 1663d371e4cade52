"""The sweep scheduler: claims runs in the database and trains them on Ray, smallest first.

One driver loop admits runs while resources allow, claims and heartbeats them, and decides what
a returned, raised or lost run becomes (completed; failed and retried; interrupted and
requeued). What it guarantees: docs/reference/modules.md.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional

from scaling import vocab
from scaling.db.claimant import claimant_is_dead
from scaling.db.lifecycle import Lifecycle
from scaling.errors import NotFoundError, ResourceError, UserError
from scaling.orchestrator import placement
from scaling.orchestrator import dependencies
from scaling.orchestrator.expand import PlannedRun
from scaling.orchestrator.signals import uninterrupted
from scaling.orchestrator.tally import PENDING_STATES, QUEUED, RESERVING, WAITING, RunState, Tally

if TYPE_CHECKING:
    from scaling.db import Store
    from scaling.orchestrator.worker import RunOutcome
    from scaling.trainer.spec import RunSpec

#: Lost attempts (worker or node death) a run may suffer in one sweep before it is failed.
MAX_LOST_ATTEMPTS = 5
#: Simulated runs one task takes at most: each writes a few rows in a millisecond, so a task per
#: run would spend its time in Ray and in transactions (one claim, write and completion per task).
SIMULATED_PER_TASK = 32
#: Seconds the cluster's size is taken as known before Ray is asked again.
CAPACITY_REFRESH_S = 1.0


@dataclass
class SweepOutcome:
    """How a sweep ended."""

    completed: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)
    interrupted: list[str] = field(default_factory=list)
    wall_seconds: float = 0.0
    overhead_seconds: dict[str, float] = field(default_factory=dict)  # per completed run

    @property
    def ok(self) -> bool:
        return not self.failed and not self.interrupted


def run_needs(run: PlannedRun) -> tuple[float, float]:
    """CPUs and GPUs a run holds while it trains (every worker's share)."""
    e = run.spec.execution
    return e.cpus_per_worker * e.workers, e.gpus_per_worker * e.workers


def capacity_error(run: PlannedRun, cpus: float, gpus: float | None = None, where: str = "the Ray cluster") -> str | None:
    """Why a run can never start where ``cpus`` CPUs and ``gpus`` GPUs are (None when it can; GPUs unchecked if None)."""
    need_cpu, need_gpu = run_needs(run)
    if need_cpu <= cpus and (gpus is None or need_gpu <= gpus):
        return None
    need = f"{need_cpu:g} CPUs" + (f" and {need_gpu:g} GPUs" if gpus is not None else "")
    has = f"{cpus:g} CPUs" + (f" and {gpus:g} GPUs" if gpus is not None else "")
    return (f"run {run.key} needs {need} ({run.spec.execution.workers} workers) but {where} has {has}; "
            "lower resources.workers or cpus_per_worker")


def _packable(run: PlannedRun) -> bool:
    """Whether a run may share a task with others: a simulated single-worker run (no branch), not paced."""
    spec = run.spec
    return spec.simulate is not None and not spec.simulate.pace and spec.execution.workers == 1 and spec.branch is None


class Scheduler:
    """Trains the runs of one sweep on the Ray the caller has initialized."""

    def __init__(
        self,
        runs: list[PlannedRun],
        store: Store,
        store_url: str,
        sweep: str,
        runs_dir: str | Path,
        *,
        retries: int,
        max_concurrent: Optional[int] = None,
        heartbeat_s: float = 5.0,
        stale_after_s: float = 60.0,
        progress_s: float = 1.0,
        on_update: Optional[Callable[["Scheduler"], None]] = None,
    ) -> None:
        self.tally = Tally()
        self.states = [RunState(r, tally=self.tally, index=i) for i, r in enumerate(runs)]
        self.by_key = {s.key: s for s in self.states}
        # Less free CPU (or GPU) than the smallest run needs: admission stops looking at once.
        self._min_cpus = min((run_needs(r)[0] for r in runs), default=0.0)
        self._min_gpus = min((run_needs(r)[1] for r in runs), default=0.0)
        self.store = store
        self.store_url = store_url
        self.sweep = sweep
        self.runs_dir = Path(runs_dir).resolve()
        self.retries = retries
        self.max_concurrent = max_concurrent
        self.heartbeat_s = heartbeat_s
        self.stale_after_s = stale_after_s
        self.progress_s = progress_s
        self.on_update = on_update
        self.lifecycle = Lifecycle(store, sweep, stale_after_s=stale_after_s)  # claims, heartbeats, outcomes
        self.host = self.lifecycle.claimant
        self.started = time.monotonic()
        self._in_flight: dict[Any, list[RunState]] = {}  # ObjectRef -> the runs of its task
        self._remote_simulated: Any = None
        self._remote_single: Any = None
        self._remote_multi: Any = None
        self._reserving: dict[str, tuple[RunState, Any, Any]] = {}  # key -> (state, group, ready ref)
        self._capacity: Optional[tuple[float, float, float]] = None  # (asked at, CPUs, GPUs)
        self._retrained: set[str] = set()  # trunks trained again for a missing branch checkpoint

    # -- public ----------------------------------------------------------------------------
    def run_dir(self, key: str) -> Path:
        return self.runs_dir / self.sweep / key

    def run(self) -> SweepOutcome:
        """Train every run not yet completed; returns when none is left to try."""
        self._prepare()
        self._check_fits_cluster()
        last_beat = last_progress = 0.0
        try:
            while self._work_left():
                self._admit()
                self._collect(timeout=0.2)
                now = time.monotonic()
                if now - last_beat >= self.heartbeat_s:
                    self._heartbeats()
                    self._recover_waiting()
                    last_beat = now
                if now - last_progress >= self.progress_s:
                    self._read_progress()
                    last_progress = now
                    self._notify()
        except KeyboardInterrupt:
            with uninterrupted():  # a second Ctrl-C must not leave runs marked running
                self._stop("interrupted by the user (Ctrl-C)")
            raise
        except BaseException as exc:
            try:
                with uninterrupted():
                    self._stop(f"the sweep stopped: {_error_line(exc)}")
            except Exception:  # the database may be what failed: keep the first error
                pass
            raise
        self._notify()
        return self.outcome()

    def outcome(self) -> SweepOutcome:
        out = SweepOutcome(wall_seconds=time.monotonic() - self.started)
        for s in self.states:
            if s.state == vocab.COMPLETED:
                (out.skipped if s.skipped else out.completed).append(s.key)
                if s.overhead_s is not None:
                    out.overhead_seconds[s.key] = s.overhead_s
            elif s.state == vocab.FAILED:
                out.failed[s.key] = s.error or "failed"
            elif s.state == vocab.INTERRUPTED:
                out.interrupted.append(s.key)
        return out

    # -- start ------------------------------------------------------------------------------
    def _prepare(self) -> None:
        """Mark completed runs, count earlier failures, and recover runs whose claimant died."""
        self.lifecycle.remember_runs()
        recovered = set(self.lifecycle.recover_stale() or ())
        rows, failures = self._rows_and_failures()
        for s in self.states:
            row = rows.get(s.key, {})
            status = row.get("status")
            if status == vocab.COMPLETED:
                s.state, s.skipped = vocab.COMPLETED, True
                continue
            s.failures = failures.get(s.key, 0)
            if status == vocab.FAILED and s.failures > self.retries:
                s.state, s.error = vocab.FAILED, row.get("error") or "failed"
                continue
            if status == vocab.RUNNING and s.key not in recovered:
                if claimant_is_dead(row.get("host")):
                    self.lifecycle.release([s.key], f"claimant {row.get('host')} is gone")
                else:
                    s.state = WAITING  # someone else's live claim, or not stale yet

    def _rows_and_failures(self) -> tuple[dict[str, dict[str, Any]], dict[str, int]]:
        """Every run's row and its failures so far: two queries, whatever the sweep's size."""
        results = self._results()
        try:
            runs = results.runs(sweep=self.sweep, spec=False)
        except NotFoundError:  # not registered (a scheduler driven by hand)
            return {}, {}
        runs = runs.astype(object).where(runs.notna(), None)  # a missing value is None, as run() gives it
        rows = {r["run_key"]: r for r in runs.to_dict("records")} if len(runs) else {}
        events = results.events(sweep=self.sweep, kinds=[vocab.FAILURE])
        failures = {str(k): int(n) for k, n in events["run_key"].value_counts().items()} if len(events) else {}
        return rows, failures

    def _row(self, key: str) -> dict[str, Any]:
        """The run's row as the database holds it now ({} if it is not there)."""
        return self.lifecycle.row(key)

    def _check_fits_cluster(self) -> None:
        cpus, gpus = self._cluster_capacity()
        for s in self.states:
            too_big = capacity_error(s.run, cpus, gpus)
            if too_big:
                raise ResourceError(too_big)
            if placement.needs_node_bundles(s.run.spec):
                self._check_fits_a_node(s)

    def _check_fits_a_node(self, s: RunState) -> None:
        """A tp/pp run's per-node bundle must fit some node, or its reservation would wait forever."""
        import ray

        bundles, sizes, _ = placement.bundles(s.run.spec, self._ranks_per_node(s.run))
        nodes = [n.get("Resources", {}) for n in ray.nodes() if n.get("Alive")]
        big = max(bundles, key=lambda b: b["CPU"])
        if not any(all(n.get(k, 0.0) + 1e-9 >= v for k, v in big.items()) for n in nodes):
            raise ResourceError(
                f"run {s.key} places {max(sizes)} ranks on one node (resources.cluster.gpus_per_node) and "
                f"needs {big['CPU']:g} CPUs and {big.get('GPU', 0):g} GPUs there, but no Ray node has that much; "
                "lower resources.cluster.gpus_per_node or cpus_per_worker"
            )

    @staticmethod
    def _ranks_per_node(run: PlannedRun) -> int:
        return run.ranks_per_node or run.spec.execution.workers

    # -- the loop's steps ---------------------------------------------------------------------
    def _running(self) -> list[RunState]:
        """The runs of every task in flight."""
        return [s for states in self._in_flight.values() for s in states]

    def _work_left(self) -> bool:
        return bool(self._in_flight) or self.tally.count(*PENDING_STATES) > 0

    def _cluster_capacity(self) -> tuple[float, float]:
        """The cluster's CPUs and GPUs, asked of Ray at most once a second (a node lost or joined shows then)."""
        import ray

        now = time.monotonic()
        if self._capacity is None or now - self._capacity[0] >= CAPACITY_REFRESH_S:
            total = ray.cluster_resources()
            self._capacity = (now, float(total.get("CPU", 0)), float(total.get("GPU", 0)))
        return self._capacity[1], self._capacity[2]

    def _admit(self) -> None:
        """Launch queued runs while the ledger (and max_concurrent) allows, smallest first.

        A multi-worker run first reserves its workers' bundles in a placement group; once Ray
        says they are free the group is released and the run's TorchTrainer starts at once, so
        Ray Train never waits (and times out) for CPUs another run holds. Simulated runs are
        packed, up to :data:`SIMULATED_PER_TASK`, into one task holding one run's resources.
        """
        self._finish_reservations()
        if not self.tally.count(QUEUED):
            return
        cpus, gpus = self._cluster_capacity()
        tasks = [states[0] for states in self._in_flight.values()] + [r[0] for r in self._reserving.values()]
        used_cpu = sum(run_needs(s.run)[0] for s in tasks)
        used_gpu = sum(run_needs(s.run)[1] for s in tasks)
        running = sum(len(states) for states in self._in_flight.values()) + len(self._reserving)
        starting: list[list[RunState]] = []  # tasks of single-worker runs, claimed together below
        pack: Optional[list[RunState]] = None  # the task simulated runs are being packed into
        for s in self.tally.queued():
            if self.max_concurrent is not None and running >= self.max_concurrent:
                break
            if (pack is not None and len(pack) < SIMULATED_PER_TASK and _packable(s.run)
                    and run_needs(s.run) == run_needs(pack[0].run)):
                pack.append(s)  # rides in a task already counted in the ledger
                running += 1
                continue
            if used_cpu + self._min_cpus > cpus + 1e-9 or used_gpu + self._min_gpus > gpus + 1e-9:
                break  # no run of the sweep fits what is left
            need_cpu, need_gpu = run_needs(s.run)
            if used_cpu + need_cpu > cpus + 1e-9 or used_gpu + need_gpu > gpus + 1e-9:
                continue  # a smaller run later in the queue may still fit
            if s.run.spec.branch is not None and not self._dependency_ready(s):
                continue
            if s.run.spec.execution.workers > 1:
                self._reserve(s)
            else:
                starting.append([s])
                pack = starting[-1] if _packable(s.run) else None
            running += 1
            used_cpu += need_cpu
            used_gpu += need_gpu
        self._launch(starting)

    def _dependency_ready(self, s: RunState) -> bool:
        """Whether a queued branch may start now; retrains its trunk or fails the branch when it must.

        Asked only when admission reaches the branch (there is room for it), so a sweep's waiting
        branches cost nothing while its cluster is full.
        """
        branch = s.run.spec.branch
        assert branch is not None
        parent = self.by_key.get(branch.parent)
        v = dependencies.verdict(s.run.spec, self.run_dir(s.key), parent.state if parent else None)
        if v.kind == dependencies.RETRAIN_TRUNK and parent is not None:
            if parent.key in self._retrained:
                v = dependencies.Verdict(dependencies.FAIL, f"{v.reason}, even after retraining it")
            else:
                self._retrain_trunk(parent, branch.from_step, v.reason)
                return False
        if v.kind == dependencies.FAIL:
            error = f"branch cannot start: {v.reason}"
            self.lifecycle.fail(s.key, error, step=branch.from_step)
            s.state, s.error = vocab.FAILED, error
        return v.kind == dependencies.READY

    def _retrain_trunk(self, trunk: RunState, step: int, reason: str) -> None:
        """Have a completed trunk pass ``step`` again: its later checkpoints are set aside."""
        from scaling.trainer.checkpoints.lineage import set_aside_after

        self._retrained.add(trunk.key)
        moved = set_aside_after(self.run_dir(trunk.key), step)
        self.lifecycle.retrain(trunk.key, reason, step=step,
                               message=f"{reason}; set aside {len(moved)} later checkpoint(s)")
        trunk.state, trunk.skipped, trunk.step = QUEUED, False, 0

    def _reserve(self, s: RunState) -> None:
        from ray.util.placement_group import placement_group

        bundles, sizes, strategy = placement.bundles(s.run.spec, self._ranks_per_node(s.run))
        pg = placement_group(bundles, strategy=strategy)
        self._reserving[s.key] = (s, pg, pg.ready())
        s.state, s.rank_sizes, s.rank_nodes = RESERVING, sizes, None

    def _finish_reservations(self) -> None:
        import ray
        from ray.util.placement_group import remove_placement_group

        for key, (s, pg, ready) in list(self._reserving.items()):
            done, _ = ray.wait([ready], timeout=0)
            if not done:
                continue
            del self._reserving[key]
            if placement.needs_node_bundles(s.run.spec) and s.rank_sizes is not None:
                s.rank_nodes = placement.rank_nodes(placement.bundle_nodes(pg), s.rank_sizes)
            remove_placement_group(pg)
            s.state = QUEUED
            self._launch([[s]])

    def _release_reservations(self) -> None:
        from ray.util.placement_group import remove_placement_group

        for s, pg, _ in self._reserving.values():
            remove_placement_group(pg)
            s.state = QUEUED
        self._reserving.clear()

    def _launch(self, tasks: list[list[RunState]]) -> None:
        """Claim the runs of ``tasks`` in one transaction and submit each task's claimed runs; a
        refused run is skipped (completed elsewhere) or waits (another claimant holds it)."""
        states = [s for task in tasks for s in task]
        if not states:
            return
        for s in states:  # before the claim: a run is never left running for want of its folder
            try:
                self.run_dir(s.key).mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise UserError(f"cannot create the run folder {self.run_dir(s.key)}: {exc.strerror or exc}") from None
        claims = self.lifecycle.claim_many([s.key for s in states])
        unsubmitted = {s.key for s in states if claims[s.key].attempt is not None}
        try:
            for task in tasks:
                self._start_task(task, claims)
                unsubmitted -= {s.key for s in task}
        except BaseException:  # claimed but never sent: not left running by a driver that stops
            self.lifecycle.release(sorted(unsubmitted), "the sweep stopped before the run started")
            raise

    def _start_task(self, task: list[RunState], claims: dict[str, Any]) -> None:
        """Submit the runs of ``task`` that were claimed; mark the others skipped or waiting."""
        claimed = []
        for s in task:
            claim = claims[s.key]
            if claim.attempt is not None:
                s.attempt = claim.attempt
                claimed.append(s)
            elif claim.completed:
                s.state, s.skipped = vocab.COMPLETED, True
            else:
                s.state = WAITING
        if not claimed:
            return
        first = claimed[0]
        if _packable(first.run):
            ref = self._submit_simulated(claimed)
        else:
            ref = self._submit(first.run.spec, str(self.run_dir(first.key)), first.attempt, first.rank_nodes)
        for s in claimed:
            s.state, s.started_at, s.first_seen = vocab.RUNNING, time.monotonic(), None
            s.launched_at = time.time()
        self._in_flight[ref] = claimed

    def _submit(self, spec: RunSpec, run_dir: str, attempt: int, rank_nodes: Optional[list[str]] = None) -> Any:
        import ray

        from scaling.orchestrator import worker

        e = spec.execution
        if e.workers == 1:
            if self._remote_single is None:
                self._remote_single = worker.SingleRunTask()  # a GPU run: a fresh process each
            fn = self._remote_single.options(num_cpus=e.cpus_per_worker, num_gpus=e.gpus_per_worker)
            return fn.remote(spec.model_dump_json(), self.store_url, run_dir, attempt, self.sweep, os.getcwd())
        # Multi-worker: the TorchTrainer's controller needs no CPU of its own; its workers take
        # the resources this loop has already set aside in its ledger (see _admit), so Ray
        # Train never waits for CPUs another run holds.
        if self._remote_multi is None:
            self._remote_multi = ray.remote(max_retries=0, num_cpus=0)(worker.train_multi)
        return self._remote_multi.remote(
            spec.model_dump_json(), self.store_url, run_dir, attempt, self.retries, self.sweep, os.getcwd(), rank_nodes
        )

    def _submit_simulated(self, states: list[RunState]) -> Any:
        """One task simulating ``states`` (see :func:`worker.simulate_batch`)."""
        import ray

        from scaling.orchestrator import worker

        if self._remote_simulated is None:
            self._remote_simulated = ray.remote(max_retries=0)(worker.simulate_batch)
        e = states[0].run.spec.execution
        fn = self._remote_simulated.options(num_cpus=e.cpus_per_worker, num_gpus=e.gpus_per_worker)
        return fn.remote([s.run.spec.model_dump_json() for s in states], [s.attempt for s in states],
                         self.store_url, self.sweep)

    def _collect(self, timeout: float) -> None:
        import ray

        if not self._in_flight:
            time.sleep(timeout)
            return
        # Back as soon as one task is done (not when all are), then take every other one done by now.
        ready, rest = ray.wait(list(self._in_flight), num_returns=1, timeout=timeout)
        if ready and rest:
            ready += ray.wait(rest, num_returns=len(rest), timeout=0)[0]
        returned: list[tuple[RunState, "RunOutcome"]] = []
        for ref in ready:
            states = self._in_flight.pop(ref)
            try:
                result = ray.get(ref)
            except ray.exceptions.RayTaskError as exc:
                for s in states:
                    self._failed(s, _error_line(exc))
            except (
                ray.exceptions.WorkerCrashedError,
                ray.exceptions.NodeDiedError,
                ray.exceptions.ObjectLostError,
                ray.exceptions.OwnerDiedError,
                ray.exceptions.ActorDiedError,
                ray.exceptions.RaySystemError,
                ray.exceptions.TaskCancelledError,
                ray.exceptions.TaskUnschedulableError,
            ) as exc:
                for s in states:
                    self._lost(s, _error_line(exc))
            else:
                # A simulated task returns an outcome per run; any other, its run's outcome.
                for s, out in zip(states, result if isinstance(result, list) else [result]):
                    if out.error is not None:
                        self._failed(s, out.error)
                    else:
                        returned.append((s, out))
        self._completed(returned)
        self._notify()

    # -- outcomes -------------------------------------------------------------------------------
    def _completed(self, returned: list[tuple[RunState, "RunOutcome"]]) -> None:
        """Mark the runs that returned completed, in one transaction."""
        if not returned:
            return
        now = time.time()
        losses = {}
        for s, out in returned:
            if out.task_started is not None and out.task_ended is not None and s.launched_at is not None:
                # Scheduling overhead: waiting for a worker and importing, then reporting back.
                s.overhead_s = (out.task_started - s.launched_at) + (now - out.task_ended)
            losses[s.key] = (out.final_train_loss, out.final_eval_loss)
        stored = self.lifecycle.complete_many(losses)
        for s, _ in returned:
            s.eval_loss = stored[s.key]
            s.state = vocab.COMPLETED
            s.step = s.steps

    def _failed(self, s: RunState, error: str) -> None:
        s.failures += 1
        s.error = error
        self.lifecycle.fail(s.key, error, step=s.step, attempt=s.attempt)
        if s.failures <= self.retries:
            self.lifecycle.event(s.key, s.step, vocab.RETRY, f"retry {s.failures} of {self.retries}", attempt=s.attempt)
            s.state = QUEUED
        else:
            s.state = vocab.FAILED

    def _lost(self, s: RunState, error: str) -> None:
        s.lost += 1
        self.lifecycle.interrupt(s.key, error, step=s.step, attempt=s.attempt, message=f"lost: {error}")
        if s.lost > MAX_LOST_ATTEMPTS:
            s.failures += 1
            s.error = f"lost {s.lost} times; last: {error}"
            self.lifecycle.fail(s.key, s.error, step=s.step, attempt=s.attempt)
            s.state = vocab.FAILED
        else:
            s.state = QUEUED  # resumes from its checkpoint wherever there is room

    def _stop(self, why: str) -> None:
        self._release_reservations()
        self._interrupt_all(why)
        self._notify()

    def _interrupt_all(self, why: str) -> None:
        import ray

        for ref in list(self._in_flight):
            try:
                ray.cancel(ref, force=True)
            except Exception:  # already finished or its worker is gone: nothing to cancel
                pass
        # Every run this driver holds: those of tasks in flight, and those of tasks collected
        # whose outcome was not written yet (an error or Ctrl-C between the two).
        running = list(self.tally.runs(vocab.RUNNING))
        for s in running:
            s.state = vocab.INTERRUPTED
        self.lifecycle.release([s.key for s in running], why)
        self._in_flight.clear()

    # -- periodic -----------------------------------------------------------------------------
    def _heartbeats(self) -> None:
        self.lifecycle.heartbeat(s.key for s in self._running())

    def _recover_waiting(self) -> None:
        for s in self.tally.runs(WAITING):
            row = self._row(s.key)
            status = row.get("status")
            if status == vocab.COMPLETED:
                s.state, s.skipped = vocab.COMPLETED, True
            elif status != vocab.RUNNING or claimant_is_dead(row.get("host")):
                s.state = QUEUED  # claim() takes over a dead claimant's run
            elif self._heartbeat_age(row) > self.stale_after_s:
                s.state = QUEUED

    def _read_progress(self) -> None:
        from scaling.orchestrator.display import read_progress

        try:
            read_progress(self._results(), self._running(), self.sweep)
        except Exception:  # progress is cosmetic: a busy database must not stop the sweep
            return

    def _results(self) -> Any:
        """One read connection for the whole sweep (progress, earlier failures, claims)."""
        return self.lifecycle.results()

    @staticmethod
    def _heartbeat_age(row: dict) -> float:
        from datetime import datetime, timezone

        beat = row.get("heartbeat_at")
        if beat is None:
            return float("inf")
        if isinstance(beat, str):
            beat = datetime.fromisoformat(beat)
        if beat.tzinfo is None:
            beat = beat.replace(tzinfo=timezone.utc)
        return (datetime.now(timezone.utc) - beat).total_seconds()

    def _notify(self) -> None:
        if self.on_update is not None:
            self.on_update(self)


def _error_line(exc: BaseException) -> str:
    """The root cause of a Ray error as one line (the trainer's exception, not Ray's wrapper)."""
    cause = getattr(exc, "cause", None)
    if isinstance(cause, BaseException):
        text = f"{type(cause).__name__}: {cause}"
    else:
        text = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
    return " ".join(text.split())[:500]
