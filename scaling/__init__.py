"""scaling: plan, train, record, fit and report scaling-law sweeps of language models.

The notebook API (``scaling.load_plan``, ``run_sweep``, ``connect``, ``fit``, ``recommend``,
``report``, ``hparams``, ``tasks`` and the typed results ``Estimate``, ``Fit``, ...: every name of
``scaling.api.__all__``) lives in :mod:`scaling.api` and is imported on first use, so ``import
scaling.fitting`` pulls in neither torch nor Ray. ``scaling.figures`` is
:mod:`scaling.reports.figures`; ``scaling.vocab`` names the metrics, events and statuses.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

#: Names other than the API's that ``scaling`` exports.
OWN = ("__version__", "figures", "vocab")
_api_names: Optional[tuple[str, ...]] = None


def api_names() -> tuple[str, ...]:
    """``scaling.api.__all__``, read from its source: naming the API (``dir``, ``__all__``) imports none of it."""
    global _api_names
    if _api_names is None:
        import ast

        tree = ast.parse(Path(__file__).with_name("api.py").read_text(encoding="utf-8"))
        found = [node.value for node in tree.body if isinstance(node, ast.Assign)
                 and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)]
        if len(found) != 1:
            raise ImportError("scaling/api.py must assign __all__ once, as a list of names")
        _api_names = tuple(ast.literal_eval(found[0]))
    return _api_names


def __getattr__(name: str) -> Any:
    # ``import a.b as c``, not ``from a import b``: the latter asks this very function for ``b`` first.
    if name == "__all__":
        return [OWN[0], *api_names(), *OWN[1:]]
    if name == "__version__":  # also lazy: ``import scaling.vocab`` loads scaling.vocab alone
        import scaling.version as version

        return version.__version__
    if name == "figures":
        import scaling.reports.figures as figures

        return figures
    if name == "vocab":
        import scaling.vocab as vocab

        return vocab
    if not name.startswith("__") and name in api_names():
        import scaling.api as api

        return getattr(api, name)
    raise AttributeError(f"module 'scaling' has no attribute {name!r}")


def __dir__() -> list[str]:
    """The API names too (they load on first use), so a notebook's tab completion offers them."""
    return sorted({*globals(), *__getattr__("__all__")})
