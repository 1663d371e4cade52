"""The resolver: a run request, which may say ``auto``, becomes a concrete `RunSpec`.

Every decision a request leaves open is made here, once, with the reason `scaling plan` prints:
the precision (:func:`decide_precision`), the layout (strategy, tp, pp, pipeline schedule and
micro-batch: :func:`decide_layout`, the search of :mod:`scaling.layout`), the data's fingerprint
and the tokenizer's vocabulary (:func:`decide_data`) and the rate a worker
computes at (:func:`worker_rate`). :func:`resolve` applies them to one request; the sweep's
expansion and ``scaling train`` go through these functions (the trainer applies the layout it is given), and
``scaling.trainer.train`` refuses a request (:func:`unresolved_problem`).

Probing the machine is this module's job: torch is imported only where a probe runs, so a caller
with ``Host(probe=False, data=False)`` (sizing a stored plan) stays torch-free.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace
from typing import Any, Optional

from pydantic import ValidationError

from scaling import layout
from scaling.accounting import GIB, MAX_DEVICE_GIB, check_fits
from scaling.batching import micro_batch_size
from scaling.errors import FieldProblem, ResourceError, SpecError
from scaling.trainer.spec import RunSpec, precision_problem
from scaling.trainer.sections import DataSpec, ExecutionSpec

#: FLOP/s one GPU worker achieves by default (about 40% of a current accelerator's dense peak:
#: ~1e15 FLOP/s in bf16/fp16, ~67e12 in fp32), when the plan sets no ``throughput_flops``.
GPU_THROUGHPUT_FLOPS = {"bf16": 4e14, "fp16": 4e14, "fp32": 2.7e13}
#: Achieved share of one core's probed matmul peak (`scaling.trainer.mfu`, in the run's
#: precision), per thread: the trainer reaches 66% per CPU-second for a 4-layer d_model-256 model
#: (benchmarks/bench_trainer.py); smaller matmuls reach less.
CPU_PEAK_FRACTION = 0.5
#: A CPU worker's rate when nothing is probed (torch-free callers, e.g. sizing a stored plan):
#: it only weighs the pipeline bubble against communication in the layout search.
CPU_NOMINAL_FLOPS = 2e10
#: Fixed cost of one optimizer step (Python, kernel launches, logging): it dominates for the
#: tiny CPU models of the example (about 10 ms a step measured on a laptop core).
CPU_STEP_SECONDS = 0.010
GPU_STEP_SECONDS = 0.005
#: Fixed cost of one layer's forward and backward on one micro-batch (about 20 kernels of a few
#: microseconds' launch on a GPU; PyTorch's per-operator dispatch on a CPU).
CPU_LAYER_SECONDS = 2e-4
GPU_LAYER_SECONDS = 1e-4
#: Execution fields the layout search fills under ``strategy: auto`` unless the request sets them.
LAYOUT_FIELDS = ("tp", "pp", "pp_schedule", "micro_batch_size", "ep")


@dataclass(frozen=True)
class Host:
    """The machine a request is resolved for, and what the resolver may ask of it.

    ``probe``: measure the hardware (the GPU's bf16, the CPU's matmul rates); without it
    ``auto`` precision takes the larger memory estimate (fp32 on a CPU, bf16 on a GPU) and a CPU
    worker a nominal rate. ``data``: read the corpus (its fingerprint, the tokenizer's
    vocabulary). ``cluster``: the nodes and links runs are laid out on (None: one node holding
    every worker). ``throughput_flops``: FLOP/s one worker achieves, when the plan states it.
    ``memory_bytes``: what one worker may use here, named ``memory_name`` (:func:`local_host`
    probes it; None: a request's ``device_memory_gib``, else any device's largest).
    """

    probe: bool = True
    data: bool = True
    cluster: Optional[layout.Machine] = None
    throughput_flops: Optional[float] = None
    memory_bytes: Optional[float] = None
    memory_name: str = ""

    def machine(self, device: str, workers: int) -> layout.Machine:
        """The cluster, or by default one node holding every worker (GPUs: NVLink; CPUs: gloo)."""
        if self.cluster is not None:
            return self.cluster
        if device == "cuda":
            return layout.Machine(1, workers, "nvlink", "infiniband")
        return layout.Machine(1, workers, "loopback_gloo", "loopback_gloo")


#: Resolves nothing on the machine: no probe, no corpus read (torch-free planning).
OFFLINE = Host(probe=False, data=False)


def local_host(request: RunSpec, *, data: bool = True) -> Host:
    """This machine as the host of ``request`` trained here: the device memory a worker may use
    probed (the GPU's free memory less a margin, or the RAM), unless the request names it."""
    import torch

    from scaling.trainer.probe import device_memory_bytes
    from scaling.trainer.runtime import Runtime

    device = Runtime.current(request.execution.device).device
    name = "this GPU's memory" if device.type == "cuda" else "this machine's RAM"
    return Host(data=data, memory_bytes=device_memory_bytes(request, torch.device(device)), memory_name=name)


@dataclass(frozen=True)
class Resolution:
    """What a requested precision trains in on a device, why, and a warning where it is slow."""

    requested: str
    precision: str  # bf16 | fp16 | fp32 (auto only for a simulated run)
    reason: str
    rates: dict[str, float] = field(default_factory=dict)  # probed CPU matmul FLOP/s by precision
    warning: Optional[str] = None


#: A simulated run's precision: kept as requested (nothing is trained, no device is asked).
SIMULATED = "simulated runs: nothing is trained, precision is not resolved"


@dataclass(frozen=True)
class Resolved:
    """A resolved run: the spec, how its precision was chosen, and its layout search (with reasons)."""

    spec: RunSpec
    precision: Resolution
    choice: Optional[layout.Choice] = None  # None for a simulated run

    @property
    def memory_gib(self) -> float:
        return self.choice.best.memory.total_gib if self.choice is not None and self.choice.best else 0.0


class NoLayoutError(ResourceError):
    """No layout of the request fits (``choice.options`` empty: none is even possible)."""

    def __init__(self, message: str, choice: layout.Choice) -> None:
        super().__init__(message)
        self.choice = choice


class PlacementError(SpecError):
    """The chosen layout breaks one of the spec's rules; ``label`` names the layout."""

    def __init__(self, message: str, label: str) -> None:
        super().__init__(message)
        self.label = label


def _gflops(rate: float) -> str:
    return f"{rate / 1e9:.3g} GFLOP/s"


def decide_device(requested: str, gpus_per_worker: float, *, probe: bool = True) -> str:
    """``cpu`` or ``cuda``: the one device rule of a run, whether `scaling plan` sizes it, the sweep
    places it or `scaling train` trains it here. The device the request names; else ``cuda`` where
    the worker reserves GPUs; else, probing, whether this machine has CUDA (not probing: ``cpu``).
    Its precision, layout, memory model and rate all follow from this one answer."""
    if requested != "auto":
        return requested
    if gpus_per_worker > 0:
        return "cuda"
    if not probe:
        return "cpu"
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def device_kind(execution: ExecutionSpec, host: Host = Host()) -> str:
    """:func:`decide_device` of an execution section on ``host``."""
    return decide_device(execution.device, execution.gpus_per_worker, probe=host.probe)


def worker_gpus(device: str, gpus_per_worker: float) -> float:
    """GPUs one worker computes on: those it reserves; one where it trains on ``cuda`` and reserves
    none (a run trained in place, outside Ray); none on a CPU."""
    if device != "cuda":
        return 0.0
    return gpus_per_worker if gpus_per_worker > 0 else 1.0


def decide_precision(requested: str, device: str, *, probe: bool = True) -> Resolution:
    """The precision a run requesting ``requested`` trains in on ``device`` (cpu | cuda | auto).

    ``device="cuda"`` on a machine without CUDA (a driver planning a GPU sweep) assumes a
    current GPU (Ampere or newer, native bf16). On a CPU the rates compared are one core's: the
    gap comes from the instruction set, a one-thread probe is not thrown off by other processes
    sharing the cores, and the choice, which enters the run's key, must not depend on
    ``execution.threads``. An explicit bf16 or fp16 on a CPU where it is slower than fp32 is
    kept, with a one-line warning giving both rates. Without ``probe`` nothing is measured:
    ``auto`` is the larger memory estimate of what it may become (fp32 on a CPU, bf16 on a GPU).
    """
    if requested != "auto" and (device == "cuda" or requested == "fp32" or not probe):
        return Resolution(requested, requested, "as requested")
    if not probe:
        chosen = "bf16" if device == "cuda" else "fp32"
        return Resolution(requested, chosen, f"auto: not probed, {chosen} assumed (the larger memory estimate)")
    import torch  # only where the machine is asked

    from scaling.trainer import precision as probes

    device = decide_device(device, 0)
    if device == "cuda":
        if requested != "auto":
            return Resolution(requested, requested, "as requested")
        if not torch.cuda.is_available():
            return Resolution(requested, "bf16", "auto: no GPU on this machine to ask, bf16 assumed (Ampere or newer)")
        gpu = torch.cuda.get_device_name()
        if probes.cuda_has_native_bf16():
            return Resolution(requested, "bf16", f"auto: {gpu} has native bf16")
        return Resolution(requested, "fp16", f"auto: {gpu} has no native bf16, fp16 with loss scaling")
    half = "bf16" if requested == "auto" else requested
    rates = {half: probes.cpu_rate(half, 1), "fp32": probes.cpu_rate("fp32", 1)}
    measured = f"{half} matmuls {_gflops(rates[half])} against {_gflops(rates['fp32'])} in fp32 per core"
    fast = rates[half] >= rates["fp32"]
    if requested == "auto":
        return Resolution(requested, "bf16" if fast else "fp32", f"auto: on this CPU {measured}", rates)
    slow = f"precision {requested} is slow on this CPU: {measured}; precision auto or fp32 trains faster"
    return Resolution(requested, requested, "as requested", rates, None if fast else slow)


def worker_rate(precision: str, threads: int, gpus: float, host: Host = Host()) -> float:
    """FLOP/s one worker achieves in ``precision`` on ``gpus`` (:func:`worker_gpus`; 0: a CPU): the
    host's stated figure, else a GPU default, else a share of one CPU core's probed matmul rate
    times ``threads`` (without probing, a nominal CPU rate). One core's rate: a one-thread probe is
    not thrown off by a busy machine."""
    if host.throughput_flops is not None:
        return host.throughput_flops
    if gpus > 0:
        return GPU_THROUGHPUT_FLOPS[precision] * gpus
    if not host.probe:
        return CPU_NOMINAL_FLOPS * threads
    from scaling.trainer import precision as probes

    return CPU_PEAK_FRACTION * probes.cpu_rate(precision, 1) * threads


def overheads(gpus: float) -> tuple[float, float]:
    """(fixed seconds per step, fixed seconds per layer and micro-batch) of a worker on ``gpus``
    (:func:`worker_gpus`; 0: a CPU)."""
    if gpus > 0:
        return GPU_STEP_SECONDS, GPU_LAYER_SECONDS
    return CPU_STEP_SECONDS, CPU_LAYER_SECONDS


def decide_data(data: DataSpec) -> tuple[DataSpec, Optional[int]]:
    """``data`` with its fingerprint (part of the key) and unique tokens measured from the corpus,
    and the tokenizer's vocabulary (None for byte-level or token-file data). The corpus is read
    (a tokenizer's tokens prepared) once per process: ``resolve_data`` checks each run against it."""
    from scaling.trainer.data.corpus import load_corpus

    corpus = load_corpus(data)
    if data.fingerprint != corpus.fingerprint or data.unique_tokens != corpus.unique_tokens:
        data = data.model_copy(update={"fingerprint": corpus.fingerprint, "unique_tokens": corpus.unique_tokens})
    return data, corpus.vocab_size


def layout_request(spec: RunSpec, host: Host = Host()) -> layout.Request:
    """What the layout search needs for ``spec`` (precision already decided).

    Under ``strategy: auto`` the fields of :data:`LAYOUT_FIELDS` the request sets are kept and
    the rest searched; a named strategy fixes the whole layout (its micro-batch: the request's,
    else a rank's whole share).
    """
    ex = spec.execution
    device = device_kind(ex, host)
    gpus = worker_gpus(device, ex.gpus_per_worker)
    precision = spec.precision
    if precision == "auto":  # a simulated run planned: the larger estimate
        precision = decide_precision("auto", device, probe=False).precision
    shape = spec.shape
    auto = ex.strategy == "auto"
    fixed = ex.model_fields_set if auto else set(LAYOUT_FIELDS)
    mbs = ex.micro_batch_size if "micro_batch_size" in fixed else None
    if not auto and mbs is None:
        mbs = spec.sequences_per_batch  # a named strategy without a micro-batch: a rank's whole share
    step_s, layer_s = overheads(gpus)
    return layout.Request(
        shape=shape,
        precision=precision,  # type: ignore[arg-type]
        workers=ex.workers,
        sequences=spec.sequences_per_batch,
        flops_per_step=shape.flops_per_token("6N_attention", "total") * spec.batch_tokens,
        rate=worker_rate(precision, ex.threads, gpus, host),
        memory_limit_bytes=memory_limit(ex, host),
        machine=host.machine(device, ex.workers),
        step_overhead_s=step_s,
        layer_overhead_s=layer_s,
        checkpointing=ex.activation_checkpointing,
        cpu_offload=ex.cpu_offload,
        tp=ex.tp if "tp" in fixed else None,
        pp=ex.pp if "pp" in fixed else None,
        schedule=ex.pp_schedule if "pp_schedule" in fixed else None,
        strategy=None if auto else ex.strategy,
        micro_batch_size=mbs,
        ep=ex.ep if "ep" in fixed else None,
        device=device,
    )


def memory_limit(execution: ExecutionSpec, host: Host = Host()) -> float:
    """Bytes one worker may use: the request's ``device_memory_gib``, else the host's, else the
    largest any device offers (:data:`scaling.accounting.MAX_DEVICE_GIB`)."""
    if execution.device_memory_gib is not None:
        return execution.device_memory_gib * GIB
    return host.memory_bytes if host.memory_bytes is not None else MAX_DEVICE_GIB * GIB


@functools.lru_cache(maxsize=512)
def decide_layout(request: layout.Request) -> layout.Choice:
    """The layouts a run could take and the fastest that fits (:func:`scaling.layout.choose`),
    once per distinct request (runs of one shape and batch share it)."""
    return layout.choose(request)


def decide_strategy(spec: RunSpec, workers: int, memory_bytes: float) -> Optional[layout.Candidate]:
    """The data-parallel strategy of ``spec`` on ``workers`` ranks of ``memory_bytes`` each, its
    tp, pp, schedule and micro-batch as given: the layout search's fastest that fits, or None.

    For a caller that fixes the rest of the layout itself (the trainer applies the strategy a
    RunSpec names and decides none); nothing is probed (the ranking needs no absolute rate).
    """
    ex = spec.execution
    request = replace(layout_request(spec, OFFLINE), workers=workers, memory_limit_bytes=memory_bytes,
                      machine=OFFLINE.machine(device_kind(ex, OFFLINE), workers),
                      tp=ex.tp, pp=ex.pp, schedule=ex.pp_schedule, strategy=None, ep=ex.ep,
                      micro_batch_size=ex.micro_batch_size or spec.sequences_per_batch)
    return decide_layout(request).best


def placed_execution(spec: RunSpec, best: layout.Candidate) -> ExecutionSpec:
    """The run's execution with the chosen layout: strategy, tp, pp, ep, schedule and micro-batch.

    The micro-batch size is written only where it differs from what the spec would derive from
    its own setting (a data-parallel rank's whole share by default), so a request that leaves it
    unset and fits keeps it unset.
    """
    ex, lay = spec.execution, best.layout
    update: dict[str, Any] = {"strategy": best.strategy, "tp": lay.tp, "pp": lay.pp, "ep": lay.ep,
                              "pp_schedule": best.schedule}
    if micro_batch_size(spec.sequences_per_batch, lay.dp, ex.micro_batch_size) != lay.micro_batch:
        update["micro_batch_size"] = lay.micro_batch
    return ex.model_copy(update=update)


def _concrete(spec: RunSpec, execution: ExecutionSpec) -> RunSpec:
    """``spec`` with ``execution`` as a RunSpec, validated in full (the placed layout included).

    The request's sections are validated models already and go in as they are (pydantic keeps a
    model instance of the field's class); the execution, changed by the placement, is validated
    again, and so are the run's own fields and every check across them."""
    fields = {name: getattr(spec, name) for name in RunSpec.model_fields}
    placed = RunSpec.model_validate({**fields, "execution": execution.model_dump()})
    if "key" in spec.__dict__:  # the execution is not in the key: the key computed already holds
        placed.__dict__["key"] = spec.__dict__["key"]
    return placed


def resolve(request: RunSpec, host: Host = Host()) -> Resolved:
    """The concrete RunSpec of ``request`` on ``host``, and why each choice was made.

    Precision first (it enters the key and the memory estimate), then the data (fingerprint,
    unique tokens, the tokenizer's vocabulary), then the fastest layout that fits. A simulated
    run trains nothing: it keeps its precision and runs ``single``. Raises
    :class:`NoLayoutError` when no layout fits, :class:`PlacementError` when the chosen one
    breaks a rule of the spec, SpecError for fp16 chosen by ``auto`` where it cannot train.
    """
    if request.simulate is not None:
        execution = request.execution.model_copy(update={"strategy": "single"})
        return Resolved(_concrete(request, execution), Resolution(request.precision, request.precision, SIMULATED))
    chosen = decide_precision(request.precision, device_kind(request.execution, host), probe=host.probe)
    spec = request.model_copy(update={"precision": chosen.precision})
    if host.data:
        from scaling.trainer.data.corpus import resolve_data

        spec = resolve_data(spec)
    choice = decide_layout(layout_request(spec, host))
    best = choice.best
    if best is None:
        if not choice.options:
            raise NoLayoutError(layout.no_layout_problem(choice.request), choice)
        shape, ex = spec.shape, spec.execution
        named = "execution.device_memory_gib" if ex.device_memory_gib is not None else host.memory_name
        try:
            check_fits(choice.smallest.memory, choice.request.memory_limit_bytes,
                       what=f"model {shape.n_layer}x{shape.d_model}", limit_name=named)
        except ResourceError as exc:
            raise NoLayoutError(str(exc), choice) from None
        raise NoLayoutError(f"model {shape.n_layer}x{shape.d_model} fits no layout of {ex.workers} worker(s)", choice)
    problem = precision_problem(chosen.precision, best.layout.tp, best.layout.dp)
    if problem and request.precision == "auto":
        raise SpecError(f"precision: auto chose {chosen.precision} ({chosen.reason}), but {problem}")
    try:
        placed = _concrete(spec, placed_execution(spec, best))
    except ValidationError as exc:
        raise PlacementError(FieldProblem(exc).message, best.label()) from None
    return Resolved(placed, chosen, choice)


def unresolved_problem(spec: RunSpec) -> Optional[str]:
    """Why ``spec`` cannot be trained as it is (a request with decisions left), or None."""
    if not spec.concrete:
        return ("a run request (it may leave precision, layout or data to decide) is not trained as it is: "
                "resolve it first (scaling.trainer.resolve.resolve)")
    return None
