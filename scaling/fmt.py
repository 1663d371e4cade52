"""How numbers and user text are written in what the platform shows (reports, tables), and the one
way a value with its 95% interval (or why it has none) is written (:class:`Interval`), whose
bounds, like every ``[lo, hi]`` the platform prints, are written by :func:`bounds`.

A torch-free leaf: imports nothing of ours, so the reports, the fitting tables and the CLI can
all use it.
"""

from __future__ import annotations

import html
import io
import math
from dataclasses import dataclass, replace
from typing import Any, Callable, Mapping, Optional

#: what a missing or non-finite number is shown as
MISSING = "–"


def num(x: object, digits: int = 3, missing: str = MISSING) -> str:
    """``x`` to ``digits`` significant digits; ``missing`` for None, non-numbers, NaN and infinities."""
    try:
        f = float(x)
    except (TypeError, ValueError):
        return missing
    return f"{f:.{digits}g}" if math.isfinite(f) else missing


# -- one format per quantity: the CLI's text, the report's text and its figures' axes write each alike --
#: plotly's ``exponentformat`` of a compute axis: its ticks read "1e+15", as :func:`flops` writes compute.
FLOPS_AXIS_FORMAT = "e"


def flops(x: object, missing: str = MISSING) -> str:
    """Compute in FLOPs, everywhere: three significant digits in e-notation past 10^4 ("1e+15", "3.2e+21")."""
    return num(x, 3, missing)


def loss(x: object, missing: str = MISSING) -> str:
    """A loss (nats per token, or a task's bits per byte), everywhere: four significant digits ("2.717")."""
    return num(x, 4, missing)


def count(x: object, missing: str = MISSING) -> str:
    """A count of parameters or tokens (a run's N, D, a batch in tokens), everywhere: three significant digits
    with a K, M, B or T suffix ("83.3M", "256", "65.5K"), as :func:`size` writes it."""
    return size(x, 3, missing)


def counts_apart(a: object, b: object) -> tuple[str, str]:
    """Two counts compared in one message ("D=1,020 tokens is less than one batch of 1,024"), as :func:`count`
    writes them but with as many more digits (up to 7) as it takes for unequal values to read unequal:
    "1.02K" and "1.024K"."""
    for digits in range(3, 8):
        pair = size(a, digits), size(b, digits)
        if pair[0] != pair[1] or a == b:
            return pair
    return pair


def escape(text: object) -> str:
    """User text made safe for HTML element content, attribute values and plotly labels."""
    return html.escape("" if text is None else str(text), quote=True)


class PlainText:
    """A rich console that writes plain text into a string: no colour, and no markup, since the
    names in it are the user's text. The tables the fits print and return are written with it."""

    def __init__(self, width: int) -> None:
        from rich.console import Console

        self._buffer = io.StringIO()
        self._console = Console(file=self._buffer, width=width, force_terminal=False, force_jupyter=False,
                                color_system=None, markup=False)

    def print(self, *objects: Any) -> None:
        self._console.print(*objects)

    def text(self) -> str:
        """What was printed, ending in one newline."""
        return self._buffer.getvalue().rstrip() + "\n"


#: Suffixes of a count (parameters, tokens), smallest first.
_SCALES = ((1e3, "K"), (1e6, "M"), (1e9, "B"), (1e12, "T"))


def size(x: object, digits: int = 3, missing: str = MISSING) -> str:
    """A count (parameters, tokens) to ``digits`` significant digits (whole units at least) with a
    K, M, B or T suffix: 21.6K for 21,600, 2.0M for 1,998,850 at two digits; ``missing`` as :func:`num`."""
    try:
        f = float(x)
    except (TypeError, ValueError):
        return missing
    if not math.isfinite(f):
        return missing
    rounded = abs(float(f"{f:.{digits}g}"))
    scale, suffix = 1.0, ""
    for s, name in _SCALES:
        if rounded >= s:
            scale, suffix = s, name
    v = f / scale
    if abs(v) >= 10 ** digits or (not suffix and float(v).is_integer()):
        return f"{v:.0f}{suffix}"
    text = f"{v:#.{digits}g}" if suffix else f"{v:.{digits}g}"
    return text.rstrip(".") + suffix


def bounds(lo: object, hi: object, digits: int = 3, fmt: Callable[..., str] = num) -> str:
    """The one way an interval's bounds are written: ``[lo, hi]``, each bound by ``fmt(x, digits)``
    (:func:`num`; :func:`size` for a count of parameters or tokens: ``[1.2M, 3.4M]``)."""
    return f"[{fmt(lo, digits)}, {fmt(hi, digits)}]"


#: What stands in place of an interval of each kind that has none, in a few words.
NO_INTERVAL = {"biased": "bootstrap biased", "no spread": "replicates do not vary", "unreliable": "unreliable"}


def _text(x: object) -> Optional[str]:
    return None if x is None or x == "" else str(x)


def _finite(x: object) -> Optional[float]:
    try:
        f = float(x)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


@dataclass(frozen=True)
class Interval:
    """A fitted or predicted quantity: its value, 95% bounds and SE where they are honest, else why not.

    The one value an interval is passed and stored as (:func:`scaling.fitting.core.intervals.summarise`
    makes it; :meth:`to_dict` and :meth:`from_dict` are its JSON form). ``kind`` is the summary's claim
    (``percentile`` with bounds; ``pinned``, ``biased``, ``no spread``, ``unreliable`` without),
    ``withheld`` the reason there are no bounds (None with them).
    """

    value: float
    lo: Optional[float] = None
    hi: Optional[float] = None
    se: Optional[float] = None
    #: Why no interval is given (a pinned parameter, a biased bootstrap, an unreliable law...), else None.
    withheld: Optional[str] = None
    kind: str = "none"
    #: What the bounds are pinned at (kind ``pinned``).
    pinned: Optional[str] = None
    #: Why the bounds are wider than the bootstrap's (extrapolation), else None.
    widened: Optional[str] = None
    #: The SE on the log scale of a positive quantity fitted in log (None: not asked for, or not honest).
    se_log: Optional[float] = None
    #: Why an SE that would disagree with the interval is not given (heavy-tailed replicates), else None.
    se_note: Optional[str] = None
    #: The bootstrap's own bounds before :attr:`widened` widened them (None: not widened).
    lo_param: Optional[float] = None
    hi_param: Optional[float] = None
    #: Where the estimate lies among its replicates (kind ``biased``: the fraction below it).
    quantile: Optional[float] = None
    #: What is estimated, a key of :data:`WRITERS` (``count``, ``loss``, ``flops``): printed alone, the
    #: interval is written as that quantity is everywhere else; None: four significant digits.
    quantity: Optional[str] = None

    @classmethod
    def of(cls, iv: "Mapping[str, Any] | Interval", quantity: Optional[str] = None) -> "Interval":
        """An interval's JSON form (:meth:`to_dict`, or any stored summary dict: its reason in ``note``
        or ``reason``) read back; an :class:`Interval` as it is. ``quantity`` (a key of :data:`WRITERS`)
        says how it is written when printed alone."""
        if quantity is not None and quantity not in WRITERS:
            raise ValueError(f"quantity must be one of {', '.join(WRITERS)}, not {quantity!r}")
        if isinstance(iv, Interval):
            return iv if quantity is None or iv.quantity == quantity else replace(iv, quantity=quantity)
        if not isinstance(iv, Mapping):
            raise TypeError(f"an interval is a mapping or an Interval, not {type(iv).__name__}")
        kind = str(iv.get("kind") or "none")
        lo, hi = _finite(iv.get("lo")), _finite(iv.get("hi"))
        value = _finite(iv.get("value"))
        note = iv.get("note") or iv.get("reason")
        withheld = None
        widened_around = bool(iv.get("widened"))  # bounds set around the value (:meth:`widen`), whatever the kind
        if (kind in NO_INTERVAL or kind == "pinned") and not widened_around or lo is None or hi is None:
            withheld = note or (cls._reason(kind, iv.get("pinned"), iv.get("quantile"))
                                if kind != "none" and kind != "percentile" else "no interval")
            lo = hi = None
        return cls(math.nan if value is None else value, lo, hi, None if withheld else _finite(iv.get("se")),
                   None if withheld is None else str(withheld), kind, _text(iv.get("pinned")),
                   _text(iv.get("widened")), None if withheld else _finite(iv.get("se_log")),
                   _text(iv.get("se_note") or iv.get("se_log_note")), _finite(iv.get("lo_param")),
                   _finite(iv.get("hi_param")), _finite(iv.get("quantile")), quantity)

    #: :meth:`of` under the name of the JSON side (and the notebook API's ``from_interval``).
    from_dict = of
    from_interval = of

    def to_dict(self) -> dict[str, Any]:
        """The JSON form, with the keys summaries have always been stored under (a missing number is
        NaN, which :func:`scaling.fitting.core.base.jsonable` writes as null): :meth:`from_dict` reads
        it back to an equal interval."""
        nan = math.nan
        out: dict[str, Any] = {"value": self.value, "se": nan if self.se is None else self.se,
                               "lo": nan if self.lo is None else self.lo, "hi": nan if self.hi is None else self.hi}
        if self.kind != "none":
            out["kind"] = self.kind
        optional = {"note": self.withheld if self.withheld != self._default_reason() else None,
                    "pinned": self.pinned, "widened": self.widened, "se_log": self.se_log, "se_note": self.se_note,
                    "lo_param": self.lo_param, "hi_param": self.hi_param, "quantile": self.quantile}
        if self.widened:  # a widened interval says what the bootstrap's own bounds were (NaN: it had none)
            optional |= {"lo_param": nan if self.lo_param is None else self.lo_param,
                         "hi_param": nan if self.hi_param is None else self.hi_param}
        return out | {key: value for key, value in optional.items() if value is not None}

    def _default_reason(self) -> Optional[str]:
        """The reason :meth:`of` gives an interval of this kind stored without one."""
        if self.kind in NO_INTERVAL or self.kind == "pinned" or self.lo is None or self.hi is None:
            return self._reason(self.kind, self.pinned, self.quantile) if self.kind not in ("none", "percentile") \
                else "no interval"
        return None

    def without_interval(self, why: str) -> "Interval":
        """This value without its bounds and SEs, kind ``unreliable`` and ``why`` the reason; a pinned
        value keeps saying so (it had no interval to withhold)."""
        if self.kind == "pinned":
            return self
        return Interval(self.value, withheld=str(why), kind="unreliable", quantity=self.quantity)

    def widen(self, lo: float, hi: float, why: str) -> "Interval":
        """These bounds in place of the bootstrap's (kept as :attr:`lo_param`, :attr:`hi_param`), ``why`` saying why."""
        if _finite(lo) is None or _finite(hi) is None:  # beyond float range: no interval shown
            return replace(self, lo=None, hi=None, se=None, se_log=None, withheld="no interval", widened=why,
                           lo_param=self.lo, hi_param=self.hi)
        return replace(self, lo=lo, hi=hi, withheld=None, widened=why, lo_param=self.lo, hi_param=self.hi)

    @staticmethod
    def _reason(kind: str, pinned: object = None, quantile: object = None) -> str:
        if kind == "pinned":
            return f"pinned: {pinned}"
        if kind == "biased" and _finite(quantile) is not None:
            return f"bootstrap biased (estimate at the {100 * float(quantile):.3g}% point of its replicates)"
        return NO_INTERVAL.get(kind, "")

    @property
    def interval(self) -> Optional[tuple[float, float]]:
        return None if self.lo is None or self.hi is None else (self.lo, self.hi)

    def covers(self, x: float, *, bootstrap: bool = False) -> bool:
        """Whether ``x`` lies within the bounds (False without bounds); ``bootstrap``: within the bootstrap's
        own bounds, before :meth:`widen` widened them."""
        lo, hi = (self.lo_param, self.hi_param) if bootstrap and self.widened else (self.lo, self.hi)
        return lo is not None and hi is not None and lo <= x <= hi

    def log_width(self) -> float:
        """ln(hi / lo) of positive bounds; NaN without them."""
        if self.lo is None or self.hi is None or not self.lo > 0 or not self.hi > 0:
            return math.nan
        return math.log(self.hi / self.lo)

    def bounds_text(self, digits: int = 3, fmt: Callable[..., str] = num, *, mark: bool = False) -> str:
        """What follows the value: ``[lo, hi]``, ``pinned: ...``, ``no interval: why`` or ``no interval``."""
        if self.interval is not None:
            return bounds(self.lo, self.hi, digits, fmt) + ("*" if mark and self.widened else "")
        short = self._reason(self.kind, self.pinned)
        if self.kind == "pinned":
            return short
        return f"no interval: {short}" if short else "no interval"

    def text(self, digits: int = 3, fmt: Callable[..., str] = num, *, value: bool = True, html_: bool = False,
             mark: bool = False) -> str:
        """The one way an interval is written: ``value [lo, hi]``, ``value (pinned: ...)``, ``value (no
        interval: why)`` or ``value (no interval)``. ``value=False``: the bounds part alone (a table's
        interval column; '-' for no interval and no reason); ``html_``: the bounds in a ``<span
        class="ci">``; ``mark``: a ``*`` on bounds widened for extrapolation; ``fmt(x, digits)`` writes
        each number. A value that is no number is '-', and says nothing more."""
        if _finite(self.value) is None:
            return "-"
        v = fmt(self.value, digits)
        bounds = self.bounds_text(digits, fmt, mark=mark)
        if not value:
            return "-" if bounds == "no interval" else bounds
        if self.interval is None:
            bounds = f"({bounds})"
        if html_:
            bounds = f'<span class="ci">{html.escape(bounds, quote=False)}</span>'
        return f"{v} {bounds}"

    def __str__(self) -> str:
        """As its quantity is written everywhere (``83.3M [61.2M, 112M]`` for a count of tokens)."""
        if self.quantity is None:
            return self.text(4)
        digits, writer = WRITERS[self.quantity]
        return self.text(digits, writer)


#: How each quantity is written, with its significant digits: the report's cells and the CLI's text alike.
WRITERS: dict[str, tuple[int, Callable[..., str]]] = {"count": (3, size), "loss": (4, num), "flops": (3, num)}


def interval_text(iv: "Mapping[str, Any] | Interval | None", digits: int = 3, fmt: Callable[..., str] = num,
                  **how: Any) -> str:
    """:meth:`Interval.text` of an interval or its JSON form ('-' for none)."""
    return "-" if iv is None else Interval.of(iv).text(digits, fmt, **how)


def se_text(iv: "Mapping[str, Any] | Interval") -> str:
    """The SE cell of a summary: on the fitted scale (``(ln)`` for a log-fitted quantity); '-' where none is honest."""
    iv = Interval.of(iv)
    if iv.se_log is not None:
        return f"{iv.se_log:.3g} (ln)"
    return num(iv.se, 4, "-")
