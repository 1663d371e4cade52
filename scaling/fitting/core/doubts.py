"""Why a fitted law, accuracy curve or power law may not be trusted, as data.

A :class:`Doubt` is its message (a ``str``, so it prints, joins and is read as before) and its
:class:`DoubtKind`, which is what code decides on: whether a law is reliable (it has any doubt),
and whether a doubt concerns only its parameters (:attr:`DoubtKind.about_parameters`: the
recommendation may still use such a law where its bootstrap determines the answer). Rewording a
message changes nothing but the message.
"""

from __future__ import annotations

from enum import Enum
from typing import Any, Iterable


class DoubtKind(str, Enum):
    """What a doubt is about."""

    #: Too few points (or evaluations) per fitted parameter to test the law.
    FEW_POINTS = "few points"
    #: Too few FLOP budgets or sizes, or too narrow a span, to show how the law scales.
    COVERAGE = "coverage"
    #: The bootstrap shows the data do not determine a parameter (or the law at all).
    UNDETERMINED = "undetermined"
    #: The Fisher information at the optimum is near-singular.
    ILL_CONDITIONED = "ill-conditioned"
    #: A parameter sits at a bound of the fit.
    PINNED = "pinned"
    #: An estimate, or its interval, lies where the quantity cannot be.
    IMPLAUSIBLE = "implausible"
    #: A key quantity's interval reaches where it cannot be (an exponent's across 0 or 1).
    WIDE_INTERVAL = "wide interval"
    #: Too few bootstrap resamples could be refitted.
    BOOTSTRAP = "bootstrap"
    #: A curve's feature (a sigmoid's transition) lies far outside the measured range.
    OUT_OF_RANGE = "out of range"
    #: The groups do not identify the law (too few, too narrow, collinear variables).
    IDENTIFICATION = "identification"
    #: A part of a chain of laws could not be fitted.
    NOT_FITTED = "not fitted"
    #: A form fits the data clearly worse than another form fitted to the same data.
    MISFIT = "misfit"
    #: A stored fit judged unreliable whose doubts were stored without their kinds.
    STORED = "stored"

    @property
    def about_parameters(self) -> bool:
        """Whether the doubt is about the law's parameters only, not its design or plausibility."""
        return self in PARAMETER_KINDS


#: The kinds that doubt a law's parameters (not identified, pinned, near-singular), as opposed to
#: its design (too few points or budgets) or its plausibility, which stay verdicts.
PARAMETER_KINDS = frozenset({DoubtKind.UNDETERMINED, DoubtKind.ILL_CONDITIONED, DoubtKind.PINNED})


#: How the message of a doubt that makes its law untrusted begins (:meth:`Doubt.unreliable`).
VERDICT = "unreliable: "


class Doubt(str):
    """One doubt: the message, as a string, with its :attr:`kind` and its :attr:`reason` (the message
    without the verdict and advice around it, for a line that says the verdict itself)."""

    kind: DoubtKind
    reason: str

    def __new__(cls, kind: DoubtKind | str, message: str, reason: str | None = None) -> "Doubt":
        self = super().__new__(cls, message)
        self.kind = DoubtKind(kind)
        self.reason = message if reason is None else reason
        return self

    @classmethod
    def unreliable(cls, kind: DoubtKind | str, reason: str, advice: str = "") -> "Doubt":
        """The doubt whose message is :data:`VERDICT`, ``reason`` and ``advice`` (``": do not trust ..."``)."""
        return cls(kind, f"{VERDICT}{reason}{advice}", reason)

    @property
    def message(self) -> str:
        return str.__str__(self)

    def __reduce__(self) -> tuple[Any, ...]:
        return (Doubt, (self.kind, self.message, self.reason))

    def to_dict(self) -> dict[str, str]:
        return {"kind": self.kind.value, "message": self.message, "reason": self.reason}

    @classmethod
    def from_dict(cls, d: object) -> "Doubt":
        if isinstance(d, dict):
            reason = d.get("reason")
            reason = None if reason is None else str(reason)
            try:
                return cls(str(d.get("kind")), str(d.get("message", "")), reason)
            except ValueError:
                return cls(DoubtKind.STORED, str(d.get("message", "")), reason)
        return cls(DoubtKind.STORED, str(d))


def restore(stored: object, reliable: object = True, why: str = "") -> list[Doubt]:
    """Doubts from their stored form; a record without them that was stored as unreliable keeps one
    doubt of kind :attr:`DoubtKind.STORED` saying so (``why``: its message)."""
    if isinstance(stored, list):
        return [Doubt.from_dict(d) for d in stored]
    if reliable is False:
        return [Doubt(DoubtKind.STORED, why or "unreliable: the stored fit was judged unreliable")]
    return []


def relink(notes: list[str], records: object, doubts: list[Doubt]) -> list[str]:
    """Stored notes with each doubt put back in its place (its record's ``at``: where it stood among the
    notes), as the same object, so that :meth:`Doubtful.drop_doubts` removes both; a doubt stored without
    a place is added after them (one of kind ``STORED`` only stands for a verdict, and is not)."""
    out: list[str] = list(notes)
    places = [r.get("at") if isinstance(r, dict) else None for r in (records if isinstance(records, list) else [])]
    places += [None] * (len(doubts) - len(places))
    for doubt, at in zip(doubts, places):
        if isinstance(at, int) and 0 <= at < len(out):
            out[at] = doubt
        elif doubt.kind is not DoubtKind.STORED:
            out.append(doubt)
    return out


def stored(doubts: Iterable[Doubt], notes: Iterable[str] = ()) -> list[dict[str, Any]]:
    """The JSON form of ``doubts``, each with its place among ``notes`` (``at``) where it stands there."""
    where = {id(n): i for i, n in enumerate(notes)}
    out = []
    for d in doubts:
        record: dict[str, Any] = (d if isinstance(d, Doubt) else Doubt(DoubtKind.STORED, str(d))).to_dict()
        if id(d) in where:
            record["at"] = where[id(d)]
        out.append(record)
    return out


class Doubtful:
    """A fitted object whose doubts are kept in ``doubts_`` and whose messages also read in ``notes_``."""

    #: Set by a subclass's fit or restore; an unfitted object has none (empty, never shared: replaced).
    notes_: list[str] = []  # noqa: RUF012 - rebound, never changed in place, until fitted
    doubts_: list[Doubt] = []  # noqa: RUF012

    def add_unreliable(self, kind: DoubtKind, reason: str, advice: str = "") -> Doubt:
        """Record a doubt that makes this untrusted (:meth:`Doubt.unreliable`)."""
        return self.add_doubt(kind, Doubt.unreliable(kind, reason, advice))

    def add_doubt(self, kind: DoubtKind, message: str) -> Doubt:
        """Record a doubt (``message`` may be a :class:`Doubt`); its message joins the notes, where it is
        printed among them."""
        doubt = message if isinstance(message, Doubt) else Doubt(kind, message)
        self.doubts_ = [*self.doubts_, doubt]
        self.notes_ = [*self.notes_, doubt]
        return doubt

    def drop_doubts(self, *kinds: DoubtKind) -> None:
        """Forget the doubts of ``kinds`` (a bootstrap rerun judges them afresh), and their notes."""
        gone = [d for d in self.doubts_ if d.kind in kinds]
        if not gone:
            return
        self.doubts_ = [d for d in self.doubts_ if d.kind not in kinds]
        ids = {id(d) for d in gone}
        self.notes_ = [n for n in self.notes_ if id(n) not in ids]

    def doubts(self) -> list[Doubt]:
        """Why the data cannot pin this down (empty when nothing doubts it)."""
        return list(self.doubts_)

    def reliable(self) -> bool:
        """True when nothing doubts it."""
        return not self.doubts()
