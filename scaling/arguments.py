"""The notebook API's numeric arguments, checked once where they enter.

A size, a token count or a budget is a positive finite number below a bound no experiment
reaches (past it the laws' powers overflow); a count of bootstrap replicates or a seed is a
non-negative integer. A string, a boolean, NaN, an infinity, zero or a negative value is one
:class:`~scaling.errors.ArgumentError` naming the argument as the API spells it, before any work.
"""

from __future__ import annotations

import math
import numbers

from scaling.errors import ArgumentError

#: The largest N, D (parameters, tokens) an API call takes: 1e30 is past any model or corpus.
MAX_SIZE = 1e30
#: The largest compute budget (FLOPs) an API call takes: 6 x MAX_SIZE x MAX_SIZE rounded up.
MAX_COMPUTE = 1e61
#: The most bootstrap replicates an API call takes (approach 3 refits every one).
MAX_BOOTSTRAP = 10_000
#: Seeds of numpy's generators are below 2**32.
MAX_SEED = 2**32 - 1

_UNITS = {"N": ("parameters", MAX_SIZE), "D": ("tokens", MAX_SIZE), "C": ("FLOPs", MAX_COMPUTE),
          "compute": ("FLOPs", MAX_COMPUTE)}


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def check_size(value: object, name: str, where: str) -> float:
    """``value`` as a float: a positive finite N, D, C or compute (``name``) of the call ``where``."""
    unit, most = _UNITS[name]
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ArgumentError(f"{where}: {name} must be a number of {unit}, not {_shown(value)} "
                            f"(a {type(value).__name__})")
    number = float(value)
    if not (math.isfinite(number) and number > 0):
        raise ArgumentError(f"{where}: {name} must be a positive finite number of {unit}, not {_shown(value)}")
    if number > most:
        raise ArgumentError(f"{where}: {name} = {number:.3g} {unit} is more than {most:.0e}, past what any law "
                            "here can say")
    return number


def check_count(value: object, name: str, where: str, *, least: int = 0, most: int) -> int:
    """``value`` as an int in [``least``, ``most``]: a bootstrap count or a seed."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ArgumentError(f"{where}: {name} must be a whole number, not {_shown(value)} (a {type(value).__name__})")
    number = int(value)
    if not least <= number <= most:
        raise ArgumentError(f"{where}: {name} must be between {least} and {most:,}, not {number:,}")
    return number


def check_resampling(bootstrap: object, seed: object, where: str, *, least: int = 0) -> tuple[int, int]:
    """(bootstrap, seed) checked: at least ``least`` replicates (0 means no intervals, 1 gives none)."""
    count = check_count(bootstrap, "bootstrap", where, least=least, most=MAX_BOOTSTRAP)
    if count == 1:
        raise ArgumentError(f"{where}: bootstrap=1 gives no interval: give 0 (no intervals) or at least 2")
    return count, check_count(seed, "seed", where, most=MAX_SEED)
