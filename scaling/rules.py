"""Hyperparameter rules: small expressions of N, D and C, evaluated safely.

A plan may say ``lr: "3e-3 * (N / 1e6) ** -0.25"`` or ``batch_tokens: "max(2048, 0.5 * D ** 0.5)"``.
Plan text is never given to Python's ``eval``: it is parsed with :mod:`ast` and only a short
whitelist of nodes is walked (numbers, the names N, D and C, + - * / **, unary minus and a few
functions). A leaf module: it imports nothing of scaling's.
"""

from __future__ import annotations

import ast
import math
from typing import Any, Callable, Mapping

#: Each swept hyperparameter's allowed values and the words refusing others (the run spec's bounds:
#: `scaling.trainer.sections.OptimizerSpec`, Recipe): one rule for a plan, a CSV and a transferred law.
HPARAM_CHECKS: dict[str, tuple[Callable[[float], bool], str]] = {
    "lr": (lambda v: 0 < v <= 100, "a learning rate must be positive (and at most 100)"),
    "batch_tokens": (lambda v: v > 0 and v == int(v), "a batch must be a positive whole number of tokens"),
    "beta2": (lambda v: 0 <= v < 1, "beta2 must be at least 0 and less than 1"),
}

#: Functions a rule may call, by name.
FUNCTIONS: dict[str, Callable[..., float]] = {
    "min": min,
    "max": max,
    "log": math.log,
    "log2": math.log2,
    "log10": math.log10,
    "exp": math.exp,
    "sqrt": math.sqrt,
    "abs": abs,
    "round": round,
    "floor": math.floor,
    "ceil": math.ceil,
}
#: Variables a rule may read: non-embedding (or total, per the plan) parameters, tokens, FLOPs.
VARIABLES: tuple[str, ...] = ("N", "D", "C")
_MAX_EXPR_CHARS = 500
_BINOPS: dict[type, Callable[[float, float], float]] = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: a / b,
    ast.Pow: lambda a, b: a**b,
}


class RuleError(ValueError):
    """A rule that does not parse, uses something outside the whitelist, or has no finite value."""


def parse_rule(text: str) -> ast.Expression:
    """Parse and check ``text``; raises :class:`RuleError` naming what is not allowed."""
    if not isinstance(text, str) or not text.strip():
        raise RuleError("a rule must be a non-empty expression")
    if len(text) > _MAX_EXPR_CHARS:
        raise RuleError(f"a rule must be at most {_MAX_EXPR_CHARS} characters")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        raise RuleError(f"cannot parse {text!r}: {exc.msg}") from None
    for node in ast.walk(tree):
        _check_node(node)
    return tree


def _check_node(node: ast.AST) -> None:
    if isinstance(node, (ast.Expression, ast.Load, ast.operator, ast.unaryop)):
        return  # operators are checked by the BinOp/UnaryOp that holds them
    if isinstance(node, ast.Constant):
        if isinstance(node.value, bool) or not isinstance(node.value, (int, float)):
            raise RuleError(f"only numbers are allowed as literals, not {node.value!r}")
        return
    if isinstance(node, ast.Name):
        if node.id not in VARIABLES and node.id not in FUNCTIONS:
            raise RuleError(f"unknown name {node.id!r} (use {', '.join(VARIABLES)})")
        return
    if isinstance(node, ast.BinOp):
        if type(node.op) not in _BINOPS:
            raise RuleError(f"operator {type(node.op).__name__} is not allowed (use + - * / **)")
        return
    if isinstance(node, ast.UnaryOp):
        if not isinstance(node.op, (ast.USub, ast.UAdd)):
            raise RuleError(f"operator {type(node.op).__name__} is not allowed")
        return
    if isinstance(node, ast.Call):
        if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS:
            raise RuleError(f"only the functions {', '.join(sorted(FUNCTIONS))} may be called")
        if node.keywords:
            raise RuleError("keyword arguments are not allowed in rules")
        return
    raise RuleError(f"{type(node).__name__} is not allowed in a rule")


def _eval(node: ast.AST, env: Mapping[str, float]) -> float:
    if isinstance(node, ast.Expression):
        return _eval(node.body, env)
    if isinstance(node, ast.Constant):
        return float(node.value)
    if isinstance(node, ast.Name):
        if node.id not in env:
            raise RuleError(f"{node.id} is a function, call it: {node.id}(...)")
        return float(env[node.id])
    if isinstance(node, ast.BinOp):
        left, right = _eval(node.left, env), _eval(node.right, env)
        if isinstance(node.op, ast.Pow) and abs(right) > 1e3:
            raise RuleError("exponents above 1000 are not allowed")
        value = _BINOPS[type(node.op)](left, right)
        if isinstance(value, complex):  # a negative number to a fractional power
            raise RuleError(f"({left:g}) ** {right:g} has no real value")
        return value
    if isinstance(node, ast.UnaryOp):
        value = _eval(node.operand, env)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.Call):
        assert isinstance(node.func, ast.Name)
        args = [_eval(a, env) for a in node.args]
        return float(FUNCTIONS[node.func.id](*args))
    raise RuleError(f"{type(node).__name__} is not allowed in a rule")  # unreachable after parse_rule


def evaluate(rule: str | float | int | Mapping[str, Any], N: float, D: float, C: float) -> float:
    """The value of ``rule`` for a run of N parameters, D tokens and C FLOPs.

    ``rule`` is a number, an expression string, or a power law
    ``{coef: a, exponent: b, of: N|D|C, reference: r}`` meaning ``a * (of / r) ** b``.
    """
    env = {"N": float(N), "D": float(D), "C": float(C)}
    if isinstance(rule, bool):
        raise RuleError("a rule must be a number, an expression or a power law")
    if isinstance(rule, (int, float)):
        value = float(rule)
    elif isinstance(rule, str):
        try:
            value = _eval(parse_rule(rule), env)
        except (ZeroDivisionError, OverflowError, ValueError, TypeError) as exc:
            if isinstance(exc, RuleError):
                raise
            raise RuleError(f"{rule!r} has no value at N={N:g}, D={D:g}, C={C:g}: {exc}") from None
    elif isinstance(rule, Mapping):
        value = _power_law(rule, env)
    else:
        raise RuleError("a rule must be a number, an expression or a power law")
    if not math.isfinite(value):
        raise RuleError(f"{rule!r} is not finite at N={N:g}, D={D:g}, C={C:g}")
    return value


def _power_law(rule: Mapping[str, Any], env: Mapping[str, float]) -> float:
    allowed = {"coef", "exponent", "of", "reference"}
    extra = set(rule) - allowed
    if extra:
        raise RuleError(f"unknown power-law field(s) {sorted(extra)} (use coef, exponent, of, reference)")
    of = rule.get("of", "N")
    if of not in VARIABLES:
        raise RuleError(f"power law 'of' must be one of {VARIABLES}, got {of!r}")
    try:
        coef = float(rule["coef"])
        exponent = float(rule.get("exponent", 0.0))
        reference = float(rule.get("reference", 1.0))
    except KeyError:
        raise RuleError("a power law needs 'coef'") from None
    except (TypeError, ValueError):
        raise RuleError("power-law coef, exponent and reference must be numbers") from None
    if reference <= 0:
        raise RuleError("power-law reference must be positive")
    try:
        return coef * (env[of] / reference) ** exponent
    except (OverflowError, ZeroDivisionError) as exc:
        raise RuleError(f"power law has no value: {exc}") from None


def check_rule(rule: object) -> None:
    """Validate a rule's form without values (plan validation calls this)."""
    if isinstance(rule, str):
        parse_rule(rule)
    elif isinstance(rule, Mapping):
        _power_law(rule, {"N": 1.0, "D": 1.0, "C": 1.0})
    elif isinstance(rule, bool) or not isinstance(rule, (int, float)):
        raise RuleError("a rule must be a number, an expression or a power law")
