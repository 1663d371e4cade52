"""Expand a plan into resolved `RunSpec`s, as a pipeline of named stages.

Each stage takes the previous one's output and returns new values; none keeps state between
calls:

0. :func:`transferred` - each ``{fitted: SWEEP}`` rule written out as the law fitted on that
   sweep's hyperparameter groups (`scaling.orchestrator.transfer`).
1. :func:`shared` - what every run of the plan shares, decided once by the resolver
   (`scaling.trainer.resolve`): the precision, the tokenizer's vocabulary, the data's fingerprint.
2. :func:`grid_points` - the grid's points: one :class:`GridPoint` per block, model, D (or
   IsoFLOP budget) and seed, with lr and batch from the rules; too-small budgets and points outside
   the bounds are dropped with a note.
   Then :func:`hparam_points` multiplies each point of a block with ``hparams`` into its lr /
   batch / beta2 combinations, the runs of a point one group (`scaling.orchestrator.hparam_groups`).
3. :func:`run_requests` - each point as a :class:`~scaling.trainer.spec.RunRequest` (cooldown
   branches: a trunk and its branches, `scaling.orchestrator.branches`), then :func:`merged`:
   each key once.
4. :func:`placed` - each request resolved (`scaling.trainer.resolve.resolve`): the fastest layout
   that fits, validated in full as a RunSpec.
5. :func:`ordered` - smallest compute first, an IsoFLOP budget's runs together; then the adaptive
   budget is checked against the grid.

:func:`expand` runs them in this order. Smallest runs first so that early results arrive early and
a sweep cut short still covers its low budgets.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Mapping, Optional

from pydantic import ValidationError

from scaling import fmt
from scaling.accounting import Shape, check_fits
from scaling.errors import FieldProblem, PlanError, ResourceError, UserError
from scaling.layout import Candidate, Decision
from scaling.naming import printable_problem
from scaling.orchestrator import branches
from scaling.naming import group_label
from scaling.orchestrator.hparam_groups import HparamValueError, combinations, common_tokens
from scaling.orchestrator.plan import ModelPlan, Plan, ResourcesPlan, RuleValueError, TrainPlan
from scaling.orchestrator.transfer import LAWS, FittedRule, frozen_expressions, law_expressions
from scaling.orchestrator.yamlsource import YamlSource, located, where
from scaling.trainer.resolve import (
    OFFLINE,
    SIMULATED,
    Host,
    NoLayoutError,
    PlacementError,
    Resolution,
    decide_data,
    decide_precision,
    device_kind,
    resolve,
)
from scaling.trainer.spec import RunRequest, RunSpec
from scaling.trainer.sections import ExecutionSpec, LoopSettings, OptimizerSpec, Placement, Recipe
from scaling.vocab import HPARAM_GROUP_TAG

if TYPE_CHECKING:  # pragma: no cover - names for type hints only
    from scaling.fitting.analysis import Analysis
    from scaling.fitting.recommend import Recommendation
    from scaling.trainer.sections import ScheduleSpec


@dataclass(frozen=True)
class PlannedRun:
    """One run of the sweep with the planning facts `scaling plan` shows."""

    spec: RunSpec
    block: int
    kind: str  # "tokens" | "tokens_per_param" | "compute" | "branches"
    budget: Optional[float]  # the IsoFLOP budget C the run belongs to, if any
    memory_gib: float
    strategy: str
    layout: Optional[Decision] = None  # the chosen layout, its times and why (`scaling.layout`)
    ranks_per_node: Optional[int] = None  # from the plan's cluster: how the scheduler groups ranks

    @property
    def key(self) -> str:
        return self.spec.key


@dataclass
class Expansion:
    """The runs of a plan, smallest first, and notes on what was dropped and why."""

    plan: Plan
    runs: list[PlannedRun]
    notes: list[str] = field(default_factory=list)
    precision_reason: str = ""  # how the plan's precision was chosen (`scaling plan` shows it)

    @property
    def specs(self) -> list[RunSpec]:
        return [r.spec for r in self.runs]


@dataclass(frozen=True)
class Shared:
    """Stage 1's output: the plan with its precision, vocabulary and data decided, and why."""

    plan: Plan
    precision: Resolution
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class GridPoint:
    """Stage 2's output: one run the grid asks for, before it is a spec.

    A ``branches`` point stands for one model's trunk and cooldown branches (its ``tokens``,
    ``lr`` and ``batch`` are decided by `scaling.orchestrator.branches` in stage 3).
    ``overrides`` are RunSpec fields set on this point alone (merged over the plan's, nested
    mappings merged); ``tags`` are added to the run's tags.
    """

    block: int
    model: int  # the model's index in its block (for error locations)
    kind: str
    shape: Shape
    seed: int
    loc: tuple[Any, ...]  # the plan field the point comes from
    tokens: float = 0.0  # D
    budget: Optional[float] = None
    lr: float = 0.0
    batch: int = 0
    overrides: Mapping[str, Any] = field(default_factory=dict)
    tags: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Requested:
    """Stage 3's output: one run as a request, with the grid facts it keeps.

    ``template``: the request of a run of the same hyperparameter group that differs from this one
    only in its optimizer's lr and beta2 and its name, none of which the spec's checks across fields
    or the resolver read: this run is its validated copy and is placed as it is (:func:`placed`).
    """

    request: RunRequest
    block: int
    model: int
    kind: str
    budget: Optional[float]
    template: Optional[RunRequest] = None


# -- stage 1 ------------------------------------------------------------------------------------
def shared(plan: Plan, source: Optional[YamlSource] = None, host: Host = Host()) -> Shared:
    """The precision, vocabulary and data every run of ``plan`` shares, decided once on ``host``.

    All three enter the run keys (a cooldown branch names its trunk's key), so they are decided
    before any spec is built. A simulated plan trains nothing: nothing is decided.
    """
    if plan.simulate is not None:
        return Shared(plan, Resolution(plan.train.precision, plan.train.precision, SIMULATED))
    res = decide_precision(plan.train.precision, plan.resources.device, probe=host.probe)
    plan = plan.model_copy(update={"train": plan.train.model_copy(update={"precision": res.precision})})
    if host.data:
        try:
            data, vocab = decide_data(plan.data)
        except UserError as exc:
            raise _data_error(source, exc) from None
        plan = plan.with_data_vocab(vocab, source).model_copy(update={"data": data})
    return Shared(plan, res, (res.warning,) if res.warning else ())


def _data_error(source: Optional[YamlSource], exc: UserError) -> PlanError:
    """The data section's error at its line, its field named once (the message may name it already)."""
    return PlanError(located(source, ("data",), str(exc)))


# -- stage 2 ------------------------------------------------------------------------------------
def grid_points(plan: Plan, source: Optional[YamlSource] = None) -> tuple[list[GridPoint], list[str]]:
    """Every point of the grid, each seed its own, and notes on the IsoFLOP points dropped.

    Raises PlanError for a point that yields nothing usable: a budget too small for the smallest
    model, an explicit D below one batch, a rule without a value, a budget with no model in bounds.
    """
    points: list[GridPoint] = []
    notes: list[str] = []
    conv = plan.conventions
    for b, block in enumerate(plan.grid):
        shapes: list[tuple[int, Shape]] = []
        for m, model in enumerate(block.models):
            try:
                shapes.append((m, model.shape(plan.block_model(b), conv.params)))
            except ValueError as exc:
                raise PlanError(f"{where(source, ('grid', b, 'models', m))}: {exc}") from None
        kind = block.kind
        if kind == "branches":
            points += [GridPoint(b, m, kind, shape, seed, ("grid", b, "branches"))
                       for m, shape in shapes for seed in plan.seeds]
            continue
        sized = _isoflop_points(plan, b, shapes, source, notes) if kind == "compute" else _fixed_points(plan, b, shapes, source)
        points += [replace(p, seed=seed) for p in sized for seed in plan.seeds]
    return points, notes


def _isoflop_points(plan: Plan, b: int, shapes: list[tuple[int, Shape]], source: Optional[YamlSource],
                    notes: list[str]) -> list[GridPoint]:
    """Each budget of an IsoFLOP block at every model whose D is at least one batch and in bounds."""
    block, conv = plan.grid[b], plan.conventions
    by_size = sorted(shapes, key=lambda s: s[1].params(conv.params))
    smallest = by_size[0][1]
    out: list[GridPoint] = []
    for c, C in enumerate(block.compute or ()):
        loc = ("grid", b, "compute", c)
        kept = 0
        for m, shape in by_size:
            N = shape.params(conv.params)
            D = C / shape.flops_per_token(conv.flops, conv.params)
            lr, batch = _hyper(plan, N, D, C, source)
            if D < batch:
                d_text, batch_text = fmt.counts_apart(D, batch)
                reason = f"D={d_text} tokens is less than one batch ({batch_text} tokens)"
                if shape is smallest:
                    raise PlanError(
                        f"{where(source, loc)}: C={fmt.flops(C)} FLOPs is too small for the smallest model "
                        f"(N={fmt.count(N)}: {reason}; it needs at least "
                        f"{fmt.flops(batch * shape.flops_per_token(conv.flops, conv.params))} FLOPs)"
                    )
                notes.append(f"dropped N={fmt.count(N)} at C={fmt.flops(C)}: {reason}")
                continue
            why = block.bounds.violation(D, N)
            if why:
                notes.append(f"dropped N={fmt.count(N)} at C={fmt.flops(C)}: {why} (grid.{b}.bounds)")
                continue
            kept += 1
            out.append(GridPoint(b, m, "compute", shape, 0, loc, D, C, lr, batch))
        if kept == 0:
            raise PlanError(f"{where(source, loc)}: no model of grid.{b} has D within the bounds at C={fmt.flops(C)} FLOPs")
    return out


def _fixed_points(plan: Plan, b: int, shapes: list[tuple[int, Shape]], source: Optional[YamlSource]) -> list[GridPoint]:
    """Every model at every D of a ``tokens`` or ``tokens_per_param`` block."""
    block, conv = plan.grid[b], plan.conventions
    kind = block.kind
    out: list[GridPoint] = []
    for m, shape in shapes:
        N = shape.params(conv.params)
        for j, v in enumerate((block.tokens if kind == "tokens" else block.tokens_per_param) or ()):
            D = v if kind == "tokens" else v * N
            lr, batch = _hyper(plan, N, D, shape.flops_per_token(conv.flops, conv.params) * D, source)
            loc = ("grid", b, kind, j)
            if D < batch:
                d_text, batch_text = fmt.counts_apart(D, batch)
                raise PlanError(f"{where(source, loc)}: D={d_text} tokens for N={fmt.count(N)} is less than one batch "
                                f"({batch_text} tokens)")
            out.append(GridPoint(b, m, kind, shape, 0, loc, D, None, lr, batch))
    return out


def transferred(plan: Plan, source: Optional[YamlSource] = None, db: Optional[str] = None,
                refresh: bool = False) -> tuple[Plan, list[str]]:
    """``plan`` with each ``{fitted: SWEEP}`` rule written out as the law fitted on that sweep's
    hyperparameter groups (`scaling.orchestrator.transfer`), and notes; unchanged without one. The
    sweep is read from the rule's ``db``, else the sweep's own database (``db``: ``--db``, else the
    plan's ``db:``, ``$SCALING_DB``, ./scaling.db). A plan whose sweep is registered already keeps the
    law recorded then (frozen), unless ``refresh``. PlanError at the rule's line when nothing can be
    transferred."""
    from scaling.db import resolve_url

    wanted: dict[tuple[str, str], list[str]] = {}
    for name in LAWS:
        rule = getattr(plan.rules, name)
        if isinstance(rule, FittedRule):
            wanted.setdefault((resolve_url(cli=rule.db or db, plan=plan.db), rule.fitted), []).append(name)
    if not wanted:
        return plan, []
    frozen = {} if refresh else frozen_expressions(resolve_url(cli=db, plan=plan.db), plan.name)
    rules: dict[str, str] = {}
    notes: list[str] = []
    for (url, sweep), names in wanted.items():
        kept = [n for n in names if n in frozen]
        if kept:
            rules.update({n: frozen[n] for n in kept})
            notes.append(f"rules {', '.join(kept)}: the law{'s' if len(kept) > 1 else ''} transferred from sweep "
                         f"{sweep!r} when sweep {plan.name!r} was first registered (frozen: "
                         f"{'; '.join(f'{n} = {frozen[n]}' for n in kept)}); --refresh-transfer refits on {sweep!r} "
                         "as it is now")
        fresh = tuple(n for n in names if n not in frozen)
        if not fresh:
            continue
        try:
            rules.update(law_expressions(url, sweep, fresh, plan.conventions.params))
        except UserError as exc:
            raise PlanError(f"{where(source, ('rules', fresh[0]))}: {exc}") from None
        if refresh:
            notes.append(f"rules {', '.join(fresh)}: refitted on sweep {sweep!r} as it is now (--refresh-transfer); "
                         "the new law is recorded with this sweep")
    return plan.model_copy(update={"rules": plan.rules.model_copy(update=rules)}), notes


def hparam_points(plan: Plan, points: list[GridPoint], source: Optional[YamlSource] = None) -> list[GridPoint]:
    """Each point of a block with ``hparams`` once per combination of lr, batch and beta2
    (`scaling.orchestrator.hparam_groups`), at a D of whole batches of every combination (one point
    of the fits), its runs one group (a tag, stored with each run); other points unchanged.

    Raises PlanError at the block's ``hparams`` for a point the sweep does not suit (a batch that is
    not whole sequences or more than the point's tokens, factors that all round to one batch).
    """
    out: list[GridPoint] = []
    conv = plan.conventions
    for point in points:
        sweep = plan.grid[point.block].hparams
        if sweep is None:
            out.append(point)
            continue
        N = point.shape.params(conv.params)
        try:
            combos = combinations(sweep, point.lr, point.batch, plan.train.optimizer.beta2, plan.model.context)
            largest = max(c.batch_tokens for c in combos)
            if point.tokens < largest:
                d_text, batch_text = fmt.counts_apart(point.tokens, largest)
                raise HparamValueError("batch_tokens", f"D={d_text} tokens for N={fmt.count(N)} is less than one "
                                       f"batch of {batch_text} tokens")
            D = common_tokens(point.tokens, [c.batch_tokens for c in combos])
        except HparamValueError as exc:
            at = ("grid", point.block, "hparams") + ((exc.field,) if exc.field in sweep.fields else ())
            raise PlanError(f"{where(source, at)}: {exc}") from None
        label = group_label(point.shape.n_layer, point.shape.d_model, point.shape.n_head, D)
        name = f"{plan.name}/N{N:.3g}/D{D:.3g}/s{point.seed}"
        for c in combos:
            out.append(replace(point, tokens=D, lr=c.lr, batch=c.batch_tokens,
                               overrides={**point.overrides, "optimizer": {"beta2": c.beta2},
                                          "name": f"{name}/{c.label(sweep.fields)}"},
                               tags={**point.tags, HPARAM_GROUP_TAG: label}))
    return out


# -- stage 3 ------------------------------------------------------------------------------------
def run_requests(plan: Plan, points: list[GridPoint], source: Optional[YamlSource] = None) -> tuple[list[Requested], list[str]]:
    """Each point as a RunRequest (a ``branches`` point as its trunk and branches), each key once (:func:`merged`)."""
    built: list[Requested] = []
    executions = [_block_execution(plan, b) for b in range(len(plan.grid))]  # once per block
    templates: dict[tuple[Any, ...], RunRequest] = {}
    for point in points:
        if point.kind == "branches":
            built += _branch_requests(plan, point, source)
            continue
        shared_by = _template_key(point)
        template = templates.get(shared_by) if shared_by is not None else None
        request = _derived(template, point) if template is not None else None
        if request is None:
            template = None
            request = point_request(plan, point, source, execution=executions[point.block])
            if shared_by is not None:
                templates.setdefault(shared_by, request)
        built.append(Requested(request, point.block, point.model, point.kind, point.budget, template))
    return merged(built)


def _template_key(point: GridPoint) -> Optional[tuple[Any, ...]]:
    """What a hyperparameter group's run shares with the runs it may be derived from: everything
    but its lr, beta2 and name (None for a point that is not a group's run)."""
    if HPARAM_GROUP_TAG not in point.tags:
        return None
    rest = {k: v for k, v in point.overrides.items() if k not in ("optimizer", "name")}
    optimizer = {k: v for k, v in point.overrides.get("optimizer", {}).items() if k != "beta2"}
    return (point.block, point.model, point.kind, point.shape, point.seed, point.loc, point.tokens, point.budget,
            point.batch, repr(sorted(point.tags.items())), repr(sorted(rest.items())), repr(sorted(optimizer.items())))


def _derived(template: RunRequest, point: GridPoint) -> Optional[RunRequest]:
    """``template`` with ``point``'s lr, beta2 and name, each validated (the checks across fields
    read none of them); None where one is refused, so the point's own request words the error."""
    name = point.overrides.get("name")
    if not isinstance(name, str) or printable_problem(name):
        return None
    values = {**template.optimizer.model_dump(), "lr": point.lr, **point.overrides.get("optimizer", {})}
    try:
        optimizer = OptimizerSpec.model_validate(values)
    except ValidationError:
        return None
    return template.model_copy(update={"optimizer": optimizer, "name": name})


def _branch_requests(plan: Plan, point: GridPoint, source: Optional[YamlSource]) -> list[Requested]:
    """A ``branches`` point's trunk and branches (`scaling.orchestrator.branches` decides their D and
    lineage), the trunk's request first: each branch names it by its key."""
    lr, batch = _hyper(plan, *branches.rules_point(plan, point.block, point.shape), source)

    def request(run: branches.BranchRun, fields: dict[str, Any]) -> RunRequest:
        return point_request(plan, replace(point, tokens=run.D, lr=lr, batch=batch, loc=run.loc), source, **fields)

    trunk_run, *branch_runs = branches.expand_model(plan, point.block, point.shape, point.seed, lr, batch, source)
    trunk = request(trunk_run, trunk_run.fields)
    requests = [trunk, *(request(run, run.lineage(trunk.key)) for run in branch_runs)]
    return [Requested(r, point.block, point.model, point.kind, point.budget) for r in requests]


def merged(requested: list[Requested]) -> tuple[list[Requested], list[str]]:
    """Each key once, where it first appears, with a note for each repeat. A trunk two blocks list
    with different branch points keeps the checkpoints of all of them (its key does not change)."""
    runs: dict[str, Requested] = {}
    notes: list[str] = []
    for r in requested:
        kept = runs.setdefault(r.request.key, r)
        if kept is r:
            continue
        old = kept.request.execution.keep_steps
        steps = tuple(sorted(set(old) | set(r.request.execution.keep_steps)))
        if steps != old:  # one trunk serves the branch points of two blocks
            execution = kept.request.execution.model_copy(update={"keep_steps": steps})
            runs[r.request.key] = replace(kept, request=kept.request.model_copy(update={"execution": execution}))
        else:
            notes.append(f"duplicate run {r.request.key} (grid.{r.block}) listed once")
    return list(runs.values()), notes


def run_request(plan: Plan, shape: Shape, D: float, lr: float, batch_tokens: int, seed: int = 0,
                resources: Optional[ResourcesPlan] = None, base_execution: Optional[ExecutionSpec] = None,
                model: Optional[ModelPlan] = None, **fields: Any) -> RunRequest:
    """One run as the plan asks for it: its shared sections with the run's shape, D, lr, batch and seed.

    ``resources`` replaces the plan's (a grid block's: :meth:`Plan.block_resources`); ``fields``
    adds or replaces RunSpec fields (faults, name, tags, a schedule, a branch). Only the placement
    fields the plan sets are set on the request, so the resolver searches the others under
    ``strategy: auto``. ``base_execution``: :func:`execution_section` of ``resources``, when the
    caller has it (it is the same for every run of a block). ``model``: the model section of the
    run's grid block (:meth:`Plan.block_model`; default the plan's). Raises pydantic's ValidationError for
    a value the spec refuses.
    """
    recipe = {name: getattr(plan.train, name) for name in Recipe.model_fields}
    recipe.update(optimizer={**plan.train.optimizer.model_dump(), "lr": lr}, batch_tokens=batch_tokens)
    execution = base_execution or execution_section(plan, resources or plan.resources)
    values: dict[str, Any] = dict(
        **recipe, model=(model or plan.model).family_dump(shape.as_dict(), shape), tokens=round(D), data=plan.data,
        params_convention=plan.conventions.params, flops_convention=plan.conventions.flops,
        seed=seed, simulate=plan.simulate, execution=execution, evals=plan.evals,
    )
    return RunRequest.model_validate(_merged(values, fields))


def execution_section(plan: Plan, res: ResourcesPlan) -> ExecutionSpec:
    """The execution section of a run placed by ``res``: the plan's loop settings and the placement
    fields ``res`` sets (the resolver searches the others under ``strategy: auto``)."""
    return ExecutionSpec(
        **{name: getattr(plan.train, name) for name in LoopSettings.model_fields},
        **{name: getattr(res, name) for name in Placement.model_fields if name in res.model_fields_set},
        device=res.device,
    )


def _block_execution(plan: Plan, block: int) -> Optional[ExecutionSpec]:
    """:func:`execution_section` of grid block ``block``, or None where it is refused (each run's
    request then refuses it at the run's line, as :func:`point_request` words it)."""
    try:
        return execution_section(plan, plan.block_resources(block))
    except ValidationError:
        return None


def _merged(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``over``'s values, nested mappings merged (a pydantic model counts as its fields)."""
    out = dict(base)
    for k, v in over.items():
        old = out.get(k)
        old = old.model_dump() if hasattr(old, "model_dump") else old
        out[k] = _merged(old, v) if isinstance(v, Mapping) and isinstance(old, dict) else v
    return out


def point_request(plan: Plan, point: GridPoint, source: Optional[YamlSource] = None, *,
                  schedule: Optional[ScheduleSpec] = None, branch: Optional[dict[str, Any]] = None, keep_steps: tuple[int, ...] = (),
                  name: Optional[str] = None, tags: Optional[dict[str, str]] = None,
                  execution: Optional[ExecutionSpec] = None) -> RunRequest:
    """The request of one grid point (a trunk or branch with its lineage); PlanError at the point's line.
    ``execution``: the block's :func:`execution_section`, when the caller has it."""
    conv = plan.conventions
    fields: dict[str, Any] = {
        "faults": plan.grid[point.block].faults,
        "name": name or f"{plan.name}/N{point.shape.params(conv.params):.3g}/D{point.tokens:.3g}/s{point.seed}",
        "tags": {**_tags(plan, point.kind, point.budget), **point.tags, **(tags or {})},
    }
    if schedule is not None:
        fields["schedule"] = schedule.model_dump()
    if branch is not None or keep_steps:
        fields.update(branch=branch, execution={"keep_steps": tuple(keep_steps)})
    try:
        return run_request(plan, point.shape, point.tokens, point.lr, point.batch, point.seed,
                           plan.block_resources(point.block), execution, plan.block_model(point.block),
                           **_merged(fields, point.overrides))
    except ValidationError as exc:  # a value the trainer refuses
        problem = FieldProblem(exc)
        detail = problem.message
        field, swept = (str(problem.loc[-1]) if problem.loc else ""), plan.grid[point.block].hparams
        if problem.loc[:1] == ("model",):
            at = ("grid", point.block, "models", point.model)
        elif not problem.loc:  # a check across fields: its message names its field, the plan's is said here
            at, detail = point.loc, _in_plan_terms(detail)
        else:  # a run's own value (lr, batch, beta2): say which, and point at the sweep that made it
            at = ("grid", point.block, "hparams", field) if swept is not None and field in swept.fields else point.loc
            value = problem.value
            shown = format(value, ".4g") if isinstance(value, float) else repr(value)[:60]
            detail = f"{problem.path} {shown}: {detail}"
        raise PlanError(f"{where(source, at)}: {detail}") from None


def _in_plan_terms(detail: str) -> str:
    """A run spec's message that begins with its field (``batch_tokens: ...``) with the plan section
    that sets the field named (``train.batch_tokens: ...``)."""
    head, sep, rest = detail.partition(": ")
    section = next((name for name, model in (("train", TrainPlan), ("model", ModelPlan))
                    if head.split(".")[0] in model.model_fields), None)
    return f"{section}.{head}: {rest}" if sep and section and " " not in head else detail


# -- stage 4 ------------------------------------------------------------------------------------
def block_host(plan: Plan, block: int, host: Host = Host()) -> Host:
    """``host`` with grid block ``block``'s cluster and stated throughput."""
    return plan.block_resources(block).host(probe=host.probe, data=host.data)


def placed(plan: Plan, requests: list[Requested], source: Optional[YamlSource] = None,
           host: Host = Host()) -> list[PlannedRun]:
    """Each request resolved on its block's host: the fastest layout that fits, as a RunSpec.

    The data's fingerprint was decided in :func:`shared` (the corpus is cached: the resolver
    only checks it against each run). Raises PlanError for a run no layout can hold, whose layout
    breaks a rule or whose corpus does not suit it, ResourceError for one that fits the device
    memory under no layout.
    """
    out: list[PlannedRun] = []
    resolved: dict[int, PlannedRun] = {}  # by the request's id: a group's template is placed once
    for r in requests:
        base = r.template or r.request  # a derived run is placed as its template is
        run = resolved.get(id(base))
        if run is None:
            run = resolved[id(base)] = _placed_one(plan, r, base, source, host)
        if base is not r.request:  # the placement reads nothing a derived run changes
            spec = run.spec.model_copy(update={"optimizer": r.request.optimizer, "name": r.request.name})
            if "key" in r.request.__dict__:  # computed by merged: the placement (execution) is not in the key
                spec.__dict__["key"] = r.request.key
            run = replace(run, spec=spec)
        out.append(run)
    return out


def _placed_one(plan: Plan, r: Requested, spec: RunRequest, source: Optional[YamlSource], host: Host) -> PlannedRun:
    """``spec`` (``r``'s request or its template) resolved on its block's host (:func:`placed`)."""
    b = r.block
    on = block_host(plan, b, host)
    try:
        done = resolve(spec, on)
    except NoLayoutError as exc:
        raise _no_layout(plan, r, exc, source) from None
    except PlacementError as exc:
        raise PlanError(f"{where(source, _layout_loc(plan, b))}: run N={fmt.count(spec.n_params)} in layout "
                        f"{exc.label}: {exc}") from None
    except UserError as exc:  # the corpus does not suit the run (its vocabulary, its context)
        raise _data_error(source, exc) from None
    if done.choice is None:  # simulated: nothing is trained, no layout, no memory
        return PlannedRun(done.spec, b, r.kind, r.budget, 0.0, "single")
    best = done.choice.best
    assert best is not None  # resolve raises when nothing fits
    ex = done.spec.execution
    return PlannedRun(done.spec, b, r.kind, r.budget, best.memory.total_gib, best.strategy, done.choice.decision(),
                      on.machine(device_kind(ex, OFFLINE), ex.workers).gpus_per_node)


def _no_layout(plan: Plan, r: Requested, exc: NoLayoutError, source: Optional[YamlSource]) -> UserError:
    """The plan's error for a run no layout holds, at the field to change."""
    spec, choice, b = r.request, exc.choice, r.block
    shape = spec.shape
    if not choice.options:
        return PlanError(f"{where(source, _layout_loc(plan, b))}: run N={fmt.count(spec.n_params)} "
                         f"({shape.n_layer}x{shape.d_model}, {shape.n_head} heads): {exc}")
    resources = plan.block_resources(b)
    if resources.device_memory_gib is None:  # no device holds more than MAX_DEVICE_GIB: check_fits says so
        try:
            check_fits(choice.smallest.memory, None,
                       what=f"{where(source, ('grid', b, 'models', r.model))}: run N={fmt.count(spec.n_params)}")
        except ResourceError as err:
            return err
    return ResourceError(_does_not_fit(resources, spec, choice.smallest, b, r.model, source))


# -- stage 5 ------------------------------------------------------------------------------------
def ordered(runs: list[PlannedRun]) -> list[PlannedRun]:
    """Smallest compute first; an IsoFLOP budget's runs together, smallest model first."""
    return sorted(runs, key=lambda r: (r.budget or r.spec.flops, r.spec.n_params, r.spec.tokens, r.spec.seed))


def expand(plan: Plan, source: Optional[YamlSource] = None, *, resolve: bool = True,
           db: Optional[str] = None, refresh_transfer: bool = False) -> Expansion:
    """All runs of ``plan`` as `PlannedRun`s (smallest compute first), with notes on dropped ones.

    The stages in order (see the module's docstring). ``resolve=False`` asks nothing of this
    machine (no probe, no corpus read): ``auto`` precision takes the larger memory estimate and
    the data keeps no fingerprint. ``db`` is the database the sweep is recorded in when a command
    names one (``--db``): a ``{fitted: SWEEP}`` rule reads its sweep there unless it names its own;
    ``refresh_transfer`` refits such a law although the sweep recorded one (:func:`transferred`).
    """
    host = Host() if resolve else OFFLINE
    plan, transfer_notes = transferred(plan, source, db, refresh_transfer)
    facts = shared(plan, source, host)
    points, dropped = grid_points(facts.plan, source)
    points = hparam_points(facts.plan, points, source)
    requests, duplicates = run_requests(facts.plan, points, source)
    runs = ordered(placed(facts.plan, requests, source, host))
    _check_adaptive_budget(facts.plan, runs, source)
    return Expansion(facts.plan, runs, [*transfer_notes, *facts.notes, *dropped, *duplicates, *same_training(runs)],
                     facts.precision.reason)


#: Significant digits two runs' numbers must share to train the same configuration (a rule's lr times 1,
#: computed in two grid blocks, may differ in its last bits and so give two keys).
SAME_DIGITS = 9


def _rounded(value: object) -> object:
    """``value`` with every float rounded to :data:`SAME_DIGITS` significant digits (dicts and lists walked)."""
    if isinstance(value, float):
        return float(f"{value:.{SAME_DIGITS}g}")
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    return value


def same_training(runs: list[PlannedRun]) -> list[str]:
    """A note for each run that trains what an earlier run trains though its key differs (its result-defining
    fields equal to :data:`SAME_DIGITS` digits, D as the whole batches trained: an IsoFLOP block's D and a
    hyperparameter block's D rounded to its batches are one run): both are trained, and the fits read them
    as two seeds of one point."""
    seen: dict[str, PlannedRun] = {}
    notes = []
    for run in runs:
        fields = {**run.spec.key_fields(), "tokens": run.spec.trained_tokens}
        canonical = json.dumps(_rounded(fields), sort_keys=True)
        first = seen.setdefault(canonical, run)
        if first is not run:
            notes.append(f"runs {first.spec.key} (grid.{first.block}) and {run.spec.key} (grid.{run.block}) train the "
                         f"same configuration (the same batches, every setting equal to {SAME_DIGITS} digits): both are trained, and the fits read "
                         "them as two seeds of one point; drop one from its block to train it once")
    return notes


def _check_adaptive_budget(plan: Plan, runs: list[PlannedRun], source: Optional[YamlSource]) -> None:
    """An adaptive budget counts the grid: one the grid alone exceeds leaves the loop nothing to add."""
    if plan.adaptive is None or any(r.spec.branch is not None for r in runs):
        return  # a branch shares its trunk's compute: the loop's own accounting judges that
    grid = sum(r.spec.flops for r in runs)
    if grid > plan.adaptive.max_compute:
        raise PlanError(f"{where(source, ('adaptive', 'max_compute'))}: {fmt.flops(plan.adaptive.max_compute)} FLOPs is less "
                        f"than the grid's own {fmt.flops(grid)} (the budget includes the grid): raise it or shrink the grid")
    from scaling.fitting.core.base import MAX_EXTRAPOLATION  # as far from the data as any fit is asked about

    budgets = [r.budget or r.spec.flops for r in runs] or [plan.adaptive.target.at_compute]
    at, lo, hi = plan.adaptive.target.at_compute, min(budgets), max(budgets)
    if not lo / MAX_EXTRAPOLATION <= at <= hi * MAX_EXTRAPOLATION:
        raise PlanError(f"{where(source, ('adaptive', 'target', 'at_compute'))}: {fmt.flops(at)} FLOPs is more than "
                        f"{MAX_EXTRAPOLATION:.0e}x outside the grid's budgets ({fmt.flops(lo)} to {fmt.flops(hi)} FLOPs): "
                        f"a fit of them says nothing that far away (use {fmt.flops(lo / MAX_EXTRAPOLATION)} to "
                        f"{fmt.flops(hi * MAX_EXTRAPOLATION)})")


def _layout_loc(plan: Plan, block: int) -> tuple[Any, ...]:
    own = plan.grid[block].resources
    if own is not None and own.model_fields_set & {"tp", "pp", "ep", "pp_schedule", "workers"}:
        return ("grid", block, "resources")
    return ("resources",)


def _does_not_fit(
    r: ResourcesPlan, spec: RunSpec, least: Candidate, block: int, model: int, source: Optional[YamlSource]
) -> str:
    shape = spec.shape
    tried = (
        f"strategy {r.strategy}" if r.strategy != "auto"
        else ("one worker" if r.workers == 1 else f"any layout of {r.workers} workers (least: {least.label()})")
    )
    return (
        f"{where(source, ('resources', 'device_memory_gib'))}: run N={fmt.count(spec.n_params)} "
        f"(grid.{block}.models.{model}, {shape.n_layer}x{shape.d_model}) needs {least.memory.total_gib:.3g} GiB per "
        f"worker with {tried} (micro-batch {least.layout.micro_batch}), more than the device's "
        f"{r.device_memory_gib:g} GiB; use more workers, a smaller micro_batch_size or "
        f"activation_checkpointing"
    )


def _hyper(plan: Plan, N: float, D: float, C: float, source: Optional[YamlSource]) -> tuple[float, int]:
    try:
        return plan.hyperparameters(N, D, C)
    except RuleValueError as exc:
        raise PlanError(f"{where(source, ('rules', exc.field))}: {exc}") from None


def _tags(plan: Plan, kind: str, budget: Optional[float]) -> dict[str, str]:
    """Free-form labels (not in the key): the grid form, the IsoFLOP budget and the rules used."""
    tags = {"sweep": plan.name, "grid": kind}
    if budget is not None:
        tags["budget"] = f"{budget:.6g}"
    if plan.rules.lr is not None:
        tags["rule.lr"] = str(plan.rules.lr)
    if plan.rules.batch_tokens is not None:
        tags["rule.batch_tokens"] = str(plan.rules.batch_tokens)
    return tags


def suggest(plan: Plan, N: float, D: float, C: float, host: Host = OFFLINE) -> dict[str, Any]:
    """What ``plan`` would train for a target of N parameters, D tokens and C FLOPs.

    Returns ``shape`` (dict), ``n_params`` (exact, in the plan's convention), ``lr``,
    ``batch_tokens``, ``memory_gib`` (per worker) and ``strategy`` (None if nothing fits). By
    default nothing of this machine is asked (torch-free): ``auto`` precision takes the larger
    memory estimate.
    """
    shape = plan.model.policy().shape_for(N, plan.conventions.params)
    n_params = shape.params(plan.conventions.params)
    lr, batch = plan.hyperparameters(n_params, D, C)
    request = run_request(plan, shape, max(D, batch), lr, batch).model_copy(update={"simulate": None})  # sized as trained
    try:
        done = resolve(request, plan.resources.host(probe=host.probe, data=False))
        best = done.choice.best  # type: ignore[union-attr]  # a trained run has its layout search
        memory, strategy = best.memory.total_gib, best.strategy  # type: ignore[union-attr]
    except NoLayoutError as exc:
        memory = exc.choice.smallest.memory.total_gib if exc.choice.options else float("inf")
        strategy = None
    return {"shape": shape.as_dict(), "n_params": n_params, "lr": lr, "batch_tokens": batch,
            "memory_gib": memory, "strategy": strategy}


def size_run(plan: dict[str, Any], N: float, D: float, C: float) -> dict[str, Any]:
    """What a plan stored with its sweep (a mapping) would train for target N, D and C.

    :func:`size_recommendation` sizes a recommendation's run with it. See :func:`suggest` for the result.
    """
    return suggest(Plan.from_dict(plan), N=N, D=D, C=C)


def stored_plan(url: str, sweep: Optional[str]) -> Optional[dict[str, Any]]:
    """The plan stored with ``sweep`` in the database at ``url`` (a mapping), or None without one;
    a :class:`PlanError` where the stored text cannot be read as YAML within :mod:`scaling.safe_yaml`'s bounds."""
    from scaling.db import connect

    if sweep is None:
        return None
    with connect(url) as res:
        plan = res.sweep_info(sweep).get("plan")
    if isinstance(plan, str):  # read back from the database: bounded like a user's file
        from scaling.safe_yaml import parse

        plan = parse(plan, f"the plan stored with sweep {sweep!r}", PlanError)[0]
    return plan if isinstance(plan, dict) else None


def size_recommendation(rec: Recommendation, plan: Optional[Mapping[str, Any]], *,
                        no_plan: str = "the sweep has no stored plan") -> Recommendation:
    """``rec`` with its concrete run sized by ``plan``'s rules (:func:`size_run`) for the N, D and C it
    recommends, the hyperparameter laws applied to that run again
    (:meth:`~scaling.fitting.recommend.Recommendation.with_run`).

    Without a plan (``no_plan`` says why), or when its rules cannot size the run, the run is sized
    with the defaults and a note says why. A recommendation without an N* (no law gives one) is returned as it is.
    """
    from scaling.fitting.recommend import DEFAULT_RUN_SOURCE, default_run

    target = rec.target
    if target is None:
        return rec
    if plan is None:
        return rec.with_run(default_run(target.N), DEFAULT_RUN_SOURCE,
                            f"{no_plan}; the run is sized with the defaults")
    try:
        run = size_run(dict(plan), target.N, target.D, target.C)
    except (UserError, ValueError) as exc:
        why = " ".join(str(exc).split())
        return rec.with_run(default_run(target.N), DEFAULT_RUN_SOURCE,
                            f"the plan's rules could not size the run ({why}); used the defaults")
    return rec.with_run(run, "the plan's rules")


def sweep_recommendation(url: str, analysis: Analysis, compute: Optional[float] = None) -> Recommendation:
    """The sweep's recommendation (``analysis.recommendation``, or at ``compute`` by
    :func:`scaling.fitting.recommend.recommend`: nothing is fitted), its run sized by the plan stored with
    the sweep (:func:`size_recommendation`): what ``scaling recommend``, the closing answer of ``scaling
    sweep`` and the report print."""
    from scaling.fitting.recommend import recommend

    rec = recommend(analysis, compute)
    try:
        plan = stored_plan(url, analysis.sweep)
    except PlanError as exc:
        return size_recommendation(rec, None, no_plan=f"the stored plan could not be read ({exc})")
    return size_recommendation(rec, plan)
