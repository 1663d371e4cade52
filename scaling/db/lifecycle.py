"""A run's row through its attempts: register, claim, heartbeat, then complete, fail or interrupt.

`scaling sweep`'s scheduler and `scaling train` move runs through these same steps, so a run is
claimed, taken over, retried and counted alike whichever started it: both claim as ``host:pid``
(:func:`~scaling.db.claimant.claimant_id`), a failure is a ``failed`` status beside a ``failure``
event (which a sweep counts against its retries), and a refused claim tells a completed run from
one a live claimant holds. While a run trains, its own process heartbeats through the trainer's
recorder; a driver holding runs in other processes heartbeats them here.

Which state a run may move to from which is one table, :data:`TRANSITIONS`: the rows of the
database change only along it (the :class:`~scaling.db.store.Store` writes a step to the rows in
a state the table allows it from, and leaves a row another claimant moved on), and so do the
states a sweep's driver keeps for its runs in memory (:func:`check_transition` raises on any
other change).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, Optional

from scaling import vocab
from scaling.db.claimant import claimant_id

if TYPE_CHECKING:
    from scaling.db.results import Results

# A run's states in a sweep's driver before it is claimed (never stored); once claimed, or found
# done, its state there is one of the database's statuses.
QUEUED = "queued"  # to launch when resources allow
RESERVING = "reserving"  # a multi-worker run waiting for its placement group
WAITING = "waiting"  # another live claimant holds it; retaken if that claimant dies

#: The run state machine: from each state, the states a run may move to.
TRANSITIONS: dict[str, frozenset[str]] = {
    # A run's row (vocab.STATUSES):
    vocab.PENDING: frozenset({vocab.RUNNING,  # claimed
                              vocab.FAILED,  # a branch that cannot start
                              vocab.SUPERSEDED}),  # a later plan trains its point under another key
    vocab.RUNNING: frozenset({vocab.RUNNING,  # taken over: its claimant is gone or its heartbeat stale
                              vocab.COMPLETED, vocab.FAILED, vocab.INTERRUPTED,  # how an attempt ends
                              QUEUED}),  # (driver) retried after a failure, or resumed after a lost worker
    vocab.FAILED: frozenset({vocab.RUNNING,  # retried
                             vocab.FAILED,  # a branch that still cannot start
                             vocab.COMPLETED,  # an attempt that ended after another claimant failed its row
                             vocab.SUPERSEDED}),  # a later plan trains its point under another key
    vocab.INTERRUPTED: frozenset({vocab.RUNNING,  # resumed
                                  vocab.FAILED,  # lost too often, or a branch that cannot start
                                  vocab.COMPLETED,  # an attempt that ended after its row was released as stale
                                  vocab.SUPERSEDED}),  # a later plan trains its point under another key
    vocab.SUPERSEDED: frozenset({vocab.RUNNING}),  # claimed: a plan names its key again (the change was undone)
    vocab.COMPLETED: frozenset({vocab.INTERRUPTED,  # a trunk trained again for a branch's missing checkpoint
                                QUEUED}),  # (driver) the same
    # A sweep's driver, before a claim:
    QUEUED: frozenset({RESERVING, vocab.RUNNING, WAITING,
                       vocab.COMPLETED,  # completed already (before the sweep, or by another claimant)
                       vocab.FAILED}),  # out of retries before the sweep, or a branch that cannot start
    RESERVING: frozenset({QUEUED}),  # its workers are free (launched at once), or the sweep stops
    WAITING: frozenset({QUEUED, vocab.COMPLETED}),  # its claimant died or it completed
}


class IllegalTransition(RuntimeError):
    """A change of a run's state that :data:`TRANSITIONS` does not allow (a defect, not bad input)."""


def check_transition(old: str, new: str) -> str:
    """``new`` if a run may move from ``old`` to it; raises :class:`IllegalTransition` otherwise."""
    if new not in TRANSITIONS.get(old, ()):
        raise IllegalTransition(f"a run cannot move from {old!r} to {new!r}")
    return new


def sources(new: str) -> tuple[str, ...]:
    """The stored statuses a run's row may move to ``new`` from (the rows a write to ``new`` touches)."""
    return tuple(s for s in vocab.STATUSES if new in TRANSITIONS[s])


#: Statuses a claim takes without asking (a running row is taken only from a dead claimant).
CLAIMABLE: tuple[str, ...] = tuple(s for s in sources(vocab.RUNNING) if s != vocab.RUNNING)
#: How an attempt can end: the statuses a running row may move to but running.
ENDINGS: tuple[str, ...] = tuple(s for s in vocab.STATUSES if s in TRANSITIONS[vocab.RUNNING] - {vocab.RUNNING})


@dataclass(frozen=True)
class Claim:
    """What a claim got: an attempt number, or the row that refused it."""

    attempt: Optional[int]  # None: refused
    status: Optional[str] = None  # a refused run's status
    holder: Optional[str] = None  # a refused run's claimant
    final_loss: Optional[float] = None  # a completed run's final eval loss

    @property
    def completed(self) -> bool:
        """Refused because the run is completed already (nothing to do, not an error)."""
        return self.attempt is None and self.status == vocab.COMPLETED


class Lifecycle:
    """The runs of ``sweep`` in ``store`` (a :class:`~scaling.db.store.Store`, which imports this
    module for its table), moved by this process (the claimant ``host:pid``).

    ``stale_after_s``: how old a running run's heartbeat must be before this claimant takes it
    over (None: the store's). Reads (a refused claim's row) go through one connection, opened on
    first use; :meth:`close` closes it.
    """

    def __init__(self, store: Any, sweep: str, *, stale_after_s: Optional[float] = None) -> None:
        self.store = store
        self.sweep = sweep
        self.claimant = claimant_id()
        self.stale_after_s = store.stale_after_s if stale_after_s is None else float(stale_after_s)
        self._reader: Optional["Results"] = None

    # -- before training ---------------------------------------------------------------------
    def register(self, records: Iterable[dict[str, Any]], *, params_convention: str, flops_convention: str,
                 plan: Optional[dict[str, Any]] = None, one_per_point: bool = False, replace_plan: bool = False) -> list[str]:
        """Pending rows for the records (``RunSpec.record()``) the sweep lacks; returns their keys."""
        return self.store.register(self.sweep, records, plan=plan, params_convention=params_convention,
                                   flops_convention=flops_convention, one_per_point=one_per_point,
                                   replace_plan=replace_plan)

    def recover_stale(self) -> list[str]:
        """Running runs of the sweep whose heartbeat is stale → interrupted (claimable); their keys."""
        return self.store.recover_stale(self.stale_after_s, sweep=self.sweep)

    def remember_runs(self) -> None:
        """Look up every run of the sweep at once, for a process that will claim and complete each."""
        self.store.remember_runs(self.sweep)

    def claim(self, key: str) -> Claim:
        """Mark ``key`` running for this process and return its attempt, or the row that refused it."""
        return self.claim_many([key])[key]

    def claim_many(self, keys: list[str]) -> dict[str, Claim]:
        """:meth:`claim` for several runs in one transaction (rows of refused ones read after)."""
        attempts = self.store.claim_many(keys, self.claimant, sweep=self.sweep, stale_after_s=self.stale_after_s,
                                         claimable=CLAIMABLE)
        claims = {}
        try:
            for key in keys:
                if attempts[key] is not None:
                    claims[key] = Claim(attempts[key])
                else:
                    row = self.row(key)
                    claims[key] = Claim(None, row.get("status"), row.get("host"), row.get("final_loss"))
        except BaseException:  # the claims are committed: none may stay running for a caller that never sees them
            self.release([k for k, a in attempts.items() if a is not None], "the claimant stopped before the run started")
            raise
        return claims

    # -- while training ----------------------------------------------------------------------
    def heartbeat(self, keys: Iterable[str]) -> None:
        """Record that the claimant of each of ``keys`` is alive."""
        self.store.heartbeat_many(keys, sweep=self.sweep)

    # -- after an attempt --------------------------------------------------------------------
    def complete(self, key: str, *, final_train_loss: Optional[float] = None,
                 final_eval_loss: Optional[float] = None) -> Optional[float]:
        """Mark ``key`` completed with its final losses; returns its final eval loss as stored.

        A run another claimant completed meanwhile (it took the run over) keeps that claimant's result.
        """
        return self.complete_many({key: (final_train_loss, final_eval_loss)})[key]

    def complete_many(self, losses: dict[str, tuple[Optional[float], Optional[float]]]) -> dict[str, Optional[float]]:
        """:meth:`complete` for several runs (key: final train and eval loss) in one transaction."""
        return self.store.complete_many(losses, sweep=self.sweep, from_states=sources(vocab.COMPLETED))

    def fail(self, key: str, error: str, *, step: Optional[int] = None, attempt: Optional[int] = None) -> bool:
        """Mark ``key`` failed with ``error``, and record the failure (counted against retries).

        False, and nothing written, where the row may not fail (another claimant completed it).
        """
        if not self.store.finish(key, vocab.FAILED, error=error, sweep=self.sweep, from_states=sources(vocab.FAILED)):
            return False
        self.event(key, step, vocab.FAILURE, error, attempt=attempt)
        return True

    def interrupt(self, key: str, error: str, *, step: Optional[int] = None, attempt: Optional[int] = None,
                  message: Optional[str] = None) -> bool:
        """Mark running ``key`` interrupted (claimable again, resumed from its checkpoint) with an
        ``interrupted`` event saying why (``message``, else ``error``). False, and nothing written,
        where the row is not running (it ended meanwhile)."""
        return self._finish(key, vocab.RUNNING, vocab.INTERRUPTED, error, step, attempt, vocab.INTERRUPTED,
                            message or error)

    def retrain(self, key: str, reason: str, *, step: int, message: str) -> bool:
        """A completed trunk → interrupted (trained again past ``step``), with a ``trunk_retrain`` event."""
        return self._finish(key, vocab.COMPLETED, vocab.INTERRUPTED, f"retrained: {reason}", step, None,
                            vocab.TRUNK_RETRAIN, message)

    def _finish(self, key: str, old: str, new: str, error: str, step: Optional[int], attempt: Optional[int],
                kind: str, message: str) -> bool:
        """Move ``key`` from ``old`` to ``new`` with a ``kind`` event, if its row is in ``old``."""
        check_transition(old, new)
        if not self.store.finish(key, new, error=error, sweep=self.sweep, from_states=(old,)):
            return False
        self.event(key, step, kind, message, attempt=attempt)
        return True

    def release(self, keys: Iterable[str], reason: str) -> list[str]:
        """Those of ``keys`` still running → interrupted, each with an event giving ``reason``."""
        return self.store.mark_interrupted(keys, sweep=self.sweep, reason=reason)

    def event(self, key: str, step: Optional[int], kind: str, message: str, *, attempt: Optional[int] = None) -> None:
        """An event of ``key`` signed by this claimant."""
        detail = {"message": message, "attempt": attempt, "host": self.claimant}
        self.store.log_event(key, step, kind, detail, sweep=self.sweep)

    # -- reading -----------------------------------------------------------------------------
    def results(self) -> "Results":
        """The one read connection of this lifecycle (opened on first use)."""
        if self._reader is None:
            from scaling.db.results import connect

            self._reader = connect(self.store.url)
        return self._reader

    def row(self, key: str) -> dict[str, Any]:
        """``key``'s row as the database holds it now ({} when it is not registered)."""
        return self.results().run(key, sweep=self.sweep) or {}

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None

