"""The training loop of one run: the standard recipe, spike protection, checkpoints, metrics.

One optimizer step consumes one global batch (``spec.batch_tokens``): each rank takes its
contiguous share of the batch's sequences (``corpus.Batches.shard``) and accumulates gradients
over micro-batches of that share, each micro-batch's mean loss divided by the number of
micro-batches, so with gradients averaged over ranks the update equals the single-process one.

Per step: LR from :func:`scaling.trainer.optim.lr_at`; forward under autocast; loss in FP32;
backward (scaled for fp16); the loss averaged over the global batch is checked for a spike
*before* the update; unscale, clip by global norm, step (skipped on non-finite gradients).
A spike (non-finite, or above ``spike.factor`` times the mean of the last ``spike.window``
accepted steps) rolls back to the last checkpoint and skips every batch from the checkpoint's
cursor through the spiking one (PaLM, Chowdhery et al. 2022, Sec. 5.1, restarted ~100 steps
before a spike and skipped the batches around it).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

import torch
import torch.nn.functional as F

from scaling import vocab as names
from scaling.batching import micro_batches
from scaling.errors import SpecError, TrainingError
from scaling.trainer.checkpoints import checkpoint, lineage
from scaling.trainer.early_stop import FinalPrediction, Reference, Watch, references, stop_record
from scaling.trainer import faults
from scaling.trainer.result import TrainResult
from scaling.trainer.data.corpus import Batches, Corpus, check_corpus, eval_windows, load_corpus
from scaling.trainer.evaluation.evals import build_evaluator
from scaling.trainer.mfu import mfu, peak_flops
from scaling.trainer.families.common import family_module
from scaling.trainer.families.model import attention_kernel, build_meta_model, build_model, init_materialized, materialize
from scaling.trainer.optim import NullGradients, lr_at, param_groups, set_lr
from scaling.trainer.precision import DTYPES, autocast, uses_loss_scaling
from scaling.trainer.recorder import Recorder
from scaling.trainer.runtime import Runtime, Single
from scaling.trainer.spec import RunSpec
from scaling.trainer.step_timer import StepTimer

ReportFn = Callable[[int, dict[str, Any], Optional[str]], None]

#: Ratio-based spike detection waits for this many accepted steps (or the whole window).
MIN_SPIKE_HISTORY = 10
#: A run whose final eval loss exceeds ln(vocabulary), what a uniform guess scores, by more than
#: this many nats diverged (an untrained model starts within a few tenths of ln V).
DIVERGED_NATS = 1.0
#: What a rollback event names as its checkpoint when the run went back to its seed's weights.
SEED_STATE = "the seed's weights (no checkpoint yet)"
#: The final train loss is the mean over this many last steps (one step's loss is noisy).
FINAL_TRAIN_STEPS = 10


def open_store(url: str) -> Any:
    from scaling.db import Store

    return Store(url)


# -- builders: each makes one part of a run; the Trainer only runs the loop ----------------------
@dataclass
class RunData:
    """A run's training and evaluation data, as this rank sees it."""

    corpus: Corpus
    batches: Batches
    first: int  # this rank's first sequence of each batch
    parts: list[tuple[int, int]]  # (offset, count) of each micro-batch of this rank's share
    micro: int  # the largest micro-batch, also the evaluation's batch
    eval_rows: torch.Tensor


def build_data(spec: RunSpec, rt: Runtime) -> RunData:
    """Load and check the corpus, and split each batch into this rank's micro-batches."""
    corpus = load_corpus(spec.data)
    check_corpus(spec, corpus)
    batches = Batches(corpus, spec.model.context, spec.sequences_per_batch, spec.seed)
    # Ranks of one tensor-parallel group compute on the same sequences: the batch is shared over dp.
    first, share = batches.shard(0, rt.dp_rank, rt.dp)
    parts = micro_batches(spec.sequences_per_batch, rt.dp, share, spec.execution.micro_batch_size)
    return RunData(corpus=corpus, batches=batches, first=first, parts=parts,
                   micro=max(count for _, count in parts),
                   eval_rows=eval_windows(corpus, spec.model.context, spec.eval_tokens))


def build_parallel_model(spec: RunSpec, rt: Runtime, *, initialize: bool = True) -> Any:
    """The model on this rank's device, wrapped for the run's strategy (``Single`` on one process).

    ``initialize=False`` allocates the weights without drawing them, for a run about to load a
    checkpoint over them (replaying every draw of a large model costs minutes per rank); the
    returned object's ``init_weights`` then gives them the seed's values if nothing is loaded."""
    ex = spec.execution
    if ex.pp > 1:
        from scaling.trainer.parallel.pipeline import build_pipeline

        return build_pipeline(spec, rt, initialize=initialize)

    def init(model: torch.nn.Module) -> None:
        init_materialized(model, spec.shape, spec.seed, rt.device)  # drawn on the run's device

    if rt.distributed:  # built on the meta device, sharded, then materialized: no rank holds it all
        from scaling.trainer.parallel.data_parallel import parallelize

        par: Any = parallelize(build_meta_model(spec.shape), spec, None, device=rt.device,
                               init=init if initialize else _later)
    elif initialize:
        par = Single(build_model(spec.shape, spec.seed, rt.device))
    else:
        model = build_meta_model(spec.shape)
        materialize(model, rt.device)
        par = Single(model)
    par.model.activation_checkpointing = ex.activation_checkpointing
    par.init_weights = None if initialize else (lambda: init(par.model))
    if ex.compile:
        par.module = torch.compile(par.module)
    return par


def _later(model: torch.nn.Module) -> None:
    """No initialization at build time: ``init_weights`` runs it if no checkpoint is loaded."""


def worker_threads(spec: RunSpec) -> int:
    """Torch's CPU threads: ``execution.threads``, or every core reserved for the worker when FSDP2
    offloads its shards, so the optimizer step on the CPU (AdamW's fused CPU kernel, parallel over
    its threads) does not run on one core while the GPU waits."""
    ex = spec.execution
    if ex.cpu_offload:
        return max(ex.threads, int(ex.cpus_per_worker))
    return ex.threads


def fused_optimizer(rt: Runtime) -> bool:
    """Whether AdamW runs fused: on CUDA or the CPU, for every layout. One kernel updates every
    tensor of a group (on the CPU a 4 x d 128 model's step takes 0.9 ms instead of 4.9 ms per
    tensor), and it skips a step with non-finite gradients itself from a flag on the device, so
    the loop need not read the norm first (ZeRO-1: the flag goes to ZeroRedundancyOptimizer's
    inner optimizer; fp16: the loop unscales, takes the norm and sets the flag itself, where the
    scaler's own step would read its inf check on the host). Each parameter group holds one kind
    of tensor (plain, or DTensors of one mesh: :func:`scaling.trainer.optim.param_groups`), which
    the fused kernel needs."""
    return rt.device.type in ("cuda", "cpu")


def build_optimizer(spec: RunSpec, par: Any, rt: Runtime) -> torch.optim.Optimizer:
    """AdamW over the model's parameter groups (fused where :func:`fused_optimizer` says)."""
    opt = spec.optimizer
    fused = fused_optimizer(rt)
    return par.build_optimizer(
        param_groups(par.model, opt.weight_decay, spec.model.shape.width_mult),
        lr=opt.lr,
        betas=(opt.beta1, opt.beta2),
        eps=opt.eps,
        **({"fused": True} if fused else {}),
    )


def build_recorder(spec: RunSpec, key: str, rt: Runtime, store_url: Optional[str], store: Any,
                   sweep: Optional[str]) -> tuple[Recorder, bool]:
    """The metrics recorder (writing only on the main rank), and whether it owns its store."""
    own = store is None and bool(store_url) and rt.is_main
    if own:
        store = open_store(store_url)  # closed at the end of fit() (pooled connections)
    return Recorder(store if rt.is_main else None, key, spec.flops_per_token, sweep=sweep), own


@dataclass
class PendingStep:
    """A step taken whose loss, gradient norm and z-loss are still on their way to the host.

    On a GPU they are copied into pinned host memory without blocking as soon as the norm is
    known, and an event marks the copy: reading them one step later waits for that step's
    work only, not for the next step's forward and backward queued behind it."""

    index: int  # the step's number (0 for the first)
    cursor: int  # the batch it trained on
    values: torch.Tensor  # (loss, norm, z-loss or nan): a host copy once ``ready`` has passed
    ready: Any  # a CUDA event after the copy (None on the CPU: the values are there)
    lr: float
    routing: Optional[torch.Tensor] = None  # a routed model's step: auxiliary loss and tokens per expert

    @classmethod
    def of(cls, index: int, cursor: int, loss: torch.Tensor, norm: torch.Tensor, lr: float,
           z_loss: Optional[torch.Tensor] = None) -> "PendingStep":
        """``z_loss``: the batch's mean z-loss when the model has one."""
        z = z_loss.detach().float() if z_loss is not None else torch.full((), math.nan, device=loss.device)
        values = torch.stack([loss.detach().float(), norm.detach().float().to(loss.device), z.to(loss.device)])
        if values.device.type != "cuda":
            return cls(index, cursor, values, None, lr)
        host = torch.empty(3, dtype=torch.float32, pin_memory=True)
        host.copy_(values, non_blocking=True)
        ready = torch.cuda.Event()
        ready.record()
        return cls(index, cursor, host, ready, lr)

    def read(self) -> tuple[float, float, float]:
        """(loss, norm, z-loss or nan) on the host, waiting for this step's copy only."""
        if self.ready is not None:
            self.ready.synchronize()
        loss, norm, z = self.values.tolist()
        return loss, norm, z


class Trainer:
    """Trains one :class:`RunSpec` into ``run_dir`` (see :func:`scaling.trainer.train`)."""

    def __init__(
        self,
        spec: RunSpec,
        store_url: Optional[str],
        run_dir: str | Path,
        *,
        attempt: Optional[int] = None,
        report: Optional[ReportFn] = None,
        sweep: Optional[str] = None,
        store: Any = None,
    ) -> None:
        self.spec = spec
        self.key = spec.key  # the key the caller registered (even if data was resolved later)
        self.run_dir = Path(run_dir)
        self.attempt = attempt or 1
        self.report = report
        torch.set_num_threads(worker_threads(spec))
        self.rt = Runtime.current(spec.execution.device, spec.execution.tp, spec.execution.pp)

        self.data = build_data(spec, self.rt)
        self.tasks = build_evaluator(spec, self.data.corpus, self.data.micro)  # before anything trains
        self.total_steps = spec.steps
        self.tokens_per_step = spec.sequences_per_batch * spec.model.context

        # A run resuming from a checkpoint loads its weights: drawing them first would be wasted.
        resuming = self.rt.broadcast_object(checkpoint.latest(self.run_dir) is not None if self.rt.is_main else None)
        self.par = build_parallel_model(spec, self.rt, initialize=not resuming)
        self.pipelined = spec.execution.pp > 1
        self.optimizer = build_optimizer(spec, self.par, self.rt)
        self.null_gradients = NullGradients(self.par.model)
        self.fp16 = uses_loss_scaling(spec.precision)
        self.scaler = self.par.grad_scaler(self.fp16, self.rt.device.type)
        self.faults = faults.injector(spec.faults, self.attempt, self.rt,
                                      vocab_size=spec.model.vocab_size, seed=spec.seed)

        # Loop state (all of it goes into checkpoints).
        self.step = 0
        self.cursor = 0
        self.lr_scale = 1.0
        self.rollbacks = 0
        self.overflow_skips = 0
        self.window: deque[float] = deque(maxlen=spec.spike.window)
        self.recent: deque[float] = deque(maxlen=FINAL_TRAIN_STEPS)
        self.last_eval: Optional[float] = None
        self.resumed_from: Optional[int] = None
        self.written: set[str] = set()  # checkpoints this process wrote or verified
        self.first_scaler = self.scaler.state_dict()  # the loss scale a run from the seed starts with
        self.data_detail: dict[str, Any] = {}
        self.stopped: Optional[FinalPrediction] = None  # the prediction the run stopped early at
        self.watch = self._watch(store_url, sweep)

        # Accounting and logging.
        self.model_flops_per_token = spec.shape.model_flops_per_token()  # PaLM's count
        self.peak = peak_flops(self.rt.device, spec.precision, spec.execution.threads)
        self.rec, self._own_store = build_recorder(spec, self.key, self.rt, store_url, store, sweep)
        self.timer = StepTimer(self.rt.device)
        self.pending: Optional[PendingStep] = None  # the last step, its loss and norm not yet read
        self.settled: tuple[float, float, float] = (math.nan, math.nan, math.nan)  # its loss, lr, norm once read
        self.z_weighted = torch.zeros((), device=self.rt.device)  # this rank's share of the batch's z-loss
        # a routed family's router: its loss added, its load recorded (and balanced)
        self.router = family_module(spec.shape.family).RouterStats(self.par.model) if spec.shape.family_spec.routed else None
        self.settled_routing: Optional[list[float]] = None
        self.settled_z = math.nan

    # -- state ------------------------------------------------------------------------------
    def _meta(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "cursor": self.cursor,
            "lr_scale": self.lr_scale,
            "rollbacks": self.rollbacks,
            "overflow_skips": self.overflow_skips,
            "window": torch.tensor(list(self.window), dtype=torch.float64),
            "recent": torch.tensor(list(self.recent), dtype=torch.float64),
            "last_eval": self.last_eval,
            "stopped_early": self.stopped.to_dict() if self.stopped is not None else None,
        }

    def _save(self) -> Path:
        path = checkpoint.save(
            self.run_dir,
            self.step,
            model=self.par.model,
            optimizer=self.optimizer,
            scaler=self.scaler,
            meta=self._meta(),
            keep=self.spec.execution.keep_checkpoints,
            rt=self.rt,
            protect=self.spec.execution.keep_steps,
        )
        self.written.add(str(path))  # hashed as it was written: a rollback to it need not hash it again
        return path

    def _load(self) -> tuple[Path, dict[str, Any]] | None:
        """Restore the newest intact checkpoint (None: there is none), hashing only those this
        process did not write or verify already."""
        found = checkpoint.load_latest(self.run_dir, model=self.par.model, optimizer=self.optimizer,
                                       scaler=self.scaler, rt=self.rt, on_corrupt=self._corrupt,
                                       trusted=self.written)
        if found is None:
            return None
        path, meta = found
        self.written.add(str(path))
        if meta.get("key") != self.key:
            raise SpecError(f"{path}: checkpoint of run {meta.get('key')}, not {self.key} (wrong run_dir?)")
        self._restore(meta)
        return path, meta

    def _restore(self, meta: dict[str, Any]) -> None:
        """The loop state a checkpoint's meta holds."""
        self.step = int(meta["step"])
        self.cursor = int(meta["cursor"])
        self.window.clear()
        self.window.extend(meta["window"].tolist())
        self.recent.clear()
        self.recent.extend(meta["recent"].tolist())
        self.last_eval = meta.get("last_eval")
        self.lr_scale = float(meta["lr_scale"])
        self.rollbacks = int(meta["rollbacks"])
        self.overflow_skips = int(meta["overflow_skips"])
        stopped = meta.get("stopped_early")  # a run that stopped early resumes stopped
        self.stopped = FinalPrediction(**stopped) if stopped else None

    def _from_seed(self) -> tuple[Path, dict[str, Any]]:
        """The run's state at step 0, drawn again from its seed (what a step-0 checkpoint would hold):
        the seed's weights, a fresh optimizer and loss scale, the loop at its start."""
        init_materialized(self.par.model, self.spec.shape, self.spec.seed, self.rt.device)
        checkpoint.reset_optimizer(self.optimizer)
        if self.first_scaler:
            self.scaler.load_state_dict(self.first_scaler)
        meta = {"step": 0, "cursor": 0, "lr_scale": 1.0, "rollbacks": 0, "overflow_skips": 0,
                "window": torch.zeros(0), "recent": torch.zeros(0), "last_eval": None}
        self._restore(meta)
        return Path(SEED_STATE), meta

    def _branch_from_trunk(self) -> Path:
        """Start a cooldown branch from its trunk's checkpoint at the branch point (collective).

        The branch takes the trunk's model, optimizer, scaler, data cursor and RNG, so its loss
        curve continues the trunk's; raises TrainingError when that checkpoint is missing or
        does not verify (the orchestrator then has the trunk pass the branch point again).
        """
        branch = self.spec.branch
        assert branch is not None
        path = lineage.parent_checkpoint(self.run_dir, branch)
        exists = self.rt.broadcast_object(path.is_dir() if self.rt.is_main else None)
        problem = checkpoint.verify(path, self.rt) if exists else "it does not exist"
        meta: dict[str, Any] = {}
        if problem is None:
            try:
                meta = checkpoint.load(path, model=self.par.model, optimizer=self.optimizer, scaler=self.scaler,
                                       rt=self.rt)
            except checkpoint.CorruptCheckpoint as exc:
                problem = str(exc)
        if problem is None and (meta.get("key") != branch.parent or int(meta["step"]) != branch.from_step):
            problem = f"it is step {meta.get('step')} of run {meta.get('key')}"
        if problem is not None:
            raise TrainingError(
                f"branch {self.key}: trunk {branch.parent} has no usable checkpoint at step {branch.from_step} "
                f"({path}: {problem})"
            )
        self._restore(meta)
        self.rec.event(self.step, names.BRANCH_START, {"parent": branch.parent, "checkpoint": path.name,
                                                       "trunk_tokens": self.spec.trunk_tokens, "cursor": self.cursor})
        return path

    def _corrupt(self, path: Path, problem: str) -> None:
        self.rec.event(self.step, names.CHECKPOINT_CORRUPT, {"checkpoint": path.name, "problem": problem})

    # -- one step -----------------------------------------------------------------------------
    def _loss(self, logits: torch.Tensor, targets: torch.Tensor, logit_scale: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
        """(cross-entropy, z-loss) of one micro-batch, both means over its tokens; the z-loss
        (PaLM: the coefficient times (log Z)^2 of each token's softmax) is 0 without one."""
        logits = logits.float()
        if logit_scale != 1.0:
            logits = logits * logit_scale
        ce = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))
        coefficient = self.spec.model.z_loss
        if not coefficient:
            return ce, torch.zeros((), device=ce.device)
        return ce, coefficient * torch.logsumexp(logits, dim=-1).pow(2).mean()

    def _forward_backward(self) -> torch.Tensor:
        """Accumulate this rank's share of the batch at ``self.cursor``.

        Each micro-batch's mean loss is weighted by its share of the global batch's sequences
        (times the data-parallel size, since data parallelism averages gradients over its ranks),
        so the gradient is that of the global batch's mean loss for any split. Returns this
        rank's weighted loss; the sum over the data-parallel ranks is the global batch's mean loss.
        """
        spec, dev = self.spec, self.rt.device
        batch, world = spec.sequences_per_batch, self.rt.dp
        weighted = torch.zeros((), device=dev)
        self.z_weighted = torch.zeros((), device=dev)
        poisoned = self.faults is not None and self.faults.poisons(self.cursor)
        if self.pipelined:  # the schedule splits the share into its micro-batches itself
            share = sum(count for _, count in self.data.parts)
            x, y = self.data.batches.get(self.cursor, self.data.first, share)
            scale = 1.0
            if poisoned:
                y, scale = self.faults.poison(y, self.cursor)
            loss = self.par.step(x.to(dev), y.to(dev), scale)
            self.z_weighted = self.par.z_part
            return loss
        for i, (offset, count) in enumerate(self.data.parts):
            x, y = self.data.batches.get(self.cursor, self.data.first + offset, max(count, 1))
            x, y = x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)
            scale = 1.0
            if poisoned:
                y, scale = self.faults.poison(y, self.cursor)
            last = i == len(self.data.parts) - 1
            weight = count / batch  # an empty part (count 0) runs with weight 0, see micro_batches
            with self.par.no_sync(not last), autocast(spec.precision, dev):
                loss, z = self._loss(self.par.module(x), y, scale)
                # a routed model's balance and router z-losses: training terms, as the z-loss
                aux = self.router.micro_batch_loss(weight) if self.router is not None else 0.0
            self.scaler.scale((loss + z + aux) * (weight * world)).backward()
            weighted += loss.detach() * weight  # the train loss is the cross-entropy alone
            self.z_weighted += z.detach() * weight
        return weighted

    def _is_spike(self, loss: float) -> bool:
        if not math.isfinite(loss):
            return True
        sp = self.spec.spike
        if not sp.enabled or len(self.window) < min(MIN_SPIKE_HISTORY, sp.window):
            return False
        return loss > sp.factor * (sum(self.window) / len(self.window))

    def _train_step(self) -> None:
        """One step, reading nothing back from the device unless the step is logged or checked.

        The previous step's loss is read (and checked for a spike) only once this step's forward
        and backward are queued, so the host runs a step ahead of the device; a spike found then
        rolls back as it would have one step earlier (the checkpoint is the same, no step after a
        spike is kept). Steps that log, evaluate or checkpoint settle at once."""
        spec = self.spec
        if self.faults is not None:
            self.faults.at_step_start(self.step)
        self.timer.start()
        lr = lr_at(self.step, self.total_steps, spec.optimizer.lr, spec.schedule) * self.lr_scale
        set_lr(self.optimizer, lr)
        loss = self.rt.sum(self._forward_backward(), self.par.loss_group)
        if self.pending is not None and not self._settle():
            self.optimizer.zero_grad(set_to_none=True)  # rolled back: this step's gradients are void
            if self.router is not None:
                self.router.discard()  # and the load its forward passes counted
            return

        if self.faults is not None:
            self.faults.after_backward(self.step, self.par.model)
        self.scaler.unscale_(self.optimizer)
        self.null_gradients()
        norm = self.par.clip_grad_norm(spec.grad_clip)
        z_loss = self.rt.sum(self.z_weighted, self.par.loss_group) if spec.model.z_loss else None
        self.pending = PendingStep.of(self.step, self.cursor, loss, norm, lr, z_loss)  # on its way to the host
        self._step_if_finite(norm)  # unscaled gradients are finite exactly where the scaler found no inf
        if self.fp16:
            self.scaler.update()  # from the inf checks unscale_ recorded, on the device
        self.optimizer.zero_grad(set_to_none=True)
        if self.router is not None:
            self.pending.routing = self.router.end_step(self.rt.sum, self.par.loss_group)
        self.step += 1
        self.cursor += 1
        self.timer.stop(self.tokens_per_step)
        if self._settles_now():
            self._settle()

    def _step_if_finite(self, norm: torch.Tensor) -> None:
        """The optimizer step, skipped when the gradient norm is not finite: decided on the device
        by the fused optimizer (ZeRO-1's inner one), else by reading the norm."""
        if self.optimizer.defaults.get("fused"):
            inner = getattr(self.optimizer, "optim", self.optimizer)  # ZeroRedundancyOptimizer steps its shard's
            inner.found_inf = (~torch.isfinite(norm)).float()  # type: ignore[attr-defined]
            inner.grad_scale = None  # type: ignore[attr-defined]
            try:
                self.optimizer.step()
            finally:
                del inner.found_inf, inner.grad_scale  # type: ignore[attr-defined]
        elif math.isfinite(float(norm)):
            self.optimizer.step()

    def _settles_now(self) -> bool:
        """Whether the step just taken is evaluated, checkpointed or the last one (a logged step is
        logged when it settles, one step later like any other)."""
        ex, step = self.spec.execution, self.step
        return (step % ex.eval_interval == 0 or step % ex.checkpoint_interval == 0
                or step in ex.keep_steps or step == self.total_steps)

    def _settle(self) -> bool:
        """Read the pending step's loss and norm; accept it (and log it when it is a logged step),
        or roll back on a spike (False)."""
        p = self.pending
        assert p is not None
        self.pending = None
        loss, norm, z_loss = p.read()
        if self._is_spike(loss):
            self.optimizer.zero_grad(set_to_none=True)
            if not self.spec.spike.enabled:
                raise TrainingError(f"run {self.key}: non-finite loss at step {p.index} (spike protection off)")
            self._rollback(loss, p)
            return False
        if not math.isfinite(norm):
            self.overflow_skips += 1
            detail: dict[str, Any] = {"grad_norm": str(norm), "cursor": p.cursor}
            if self.fp16:  # the scale was backed off for this step and not updated since
                after = self.scaler.get_scale()
                detail.update(scale_before=after / self.scaler.get_backoff_factor(), scale_after=after)
            self.rec.event(p.index + 1, names.OVERFLOW_SKIP, detail)
        self.window.append(loss)
        self.recent.append(loss)
        self.settled = (loss, p.lr, norm)
        self.settled_z = z_loss
        self.settled_routing = p.routing.tolist() if p.routing is not None else None
        step = p.index + 1
        if step % self.spec.execution.log_interval == 0 or step == self.total_steps:
            self._log_step(step, p.cursor + 1)
        return True

    def _log_step(self, step: int, cursor: int) -> None:
        """Record step ``step``'s metrics (settled), ``cursor`` being the next batch after it."""
        loss, lr, norm = self.settled
        tokens = step * self.tokens_per_step
        rec = self.rec
        rec.metric(step, tokens, names.TRAIN_LOSS, loss)
        rec.metric(step, tokens, names.LEARNING_RATE, lr)
        rec.metric(step, tokens, names.GRAD_NORM, norm)
        if self.spec.model.z_loss:
            rec.metric(step, tokens, names.Z_LOSS, self.settled_z)
        if self.router is not None and self.settled_routing is not None:
            n_experts = self.spec.shape.n_experts or 0
            for name, value in self.router.metrics(self.settled_routing, n_experts).items():
                rec.metric(step, tokens, name, value)
        if self.fp16:
            rec.metric(step, tokens, names.LOSS_SCALE, self.scaler.get_scale())
        rec.metric(step, tokens, names.EPOCH, self.data.batches.epoch(cursor))
        tokens_timed, seconds = self.timer.take()
        if seconds > 0:
            tps = tokens_timed / seconds
            rec.metric(step, tokens, names.TOKENS_PER_SECOND, tps)
            util = mfu(tps, self.model_flops_per_token, self.peak, self.rt.world_size)
            if util is not None:
                rec.metric(step, tokens, names.MFU, util)

    def _rollback(self, loss: float, spiked: "PendingStep") -> None:
        sp = self.spec.spike
        mean = sum(self.window) / len(self.window) if self.window else float("nan")
        spike_cursor = spiked.cursor
        detail = {"loss": loss if math.isfinite(loss) else str(loss), "window_mean": mean, "cursor": spike_cursor}
        self.rec.event(spiked.index, names.LOSS_SPIKE, detail)
        if self.rollbacks >= sp.max_rollbacks:
            raise TrainingError(
                f"run {self.key} kept spiking: loss {loss:.4g} at step {spiked.index} after {self.rollbacks} "
                f"rollbacks (spike.max_rollbacks={sp.max_rollbacks})"
            )
        spike_step, rollbacks, skips, lr_scale = spiked.index, self.rollbacks, self.overflow_skips, self.lr_scale
        found = self._load()
        if found is None:  # no checkpoint yet (or every one corrupt): back to the seed's weights
            if self.pipelined or self.spec.branch is not None:  # these always have their first state saved
                raise TrainingError(f"run {self.key}: loss spike at step {spike_step} with no checkpoint to roll back to")
            found = self._from_seed()
        path, meta = found
        # The counters and the LR scale belong to the run's history, not to the checkpoint.
        self.rollbacks, self.overflow_skips = rollbacks + 1, skips
        self.lr_scale = lr_scale * sp.lr_scale_on_rollback
        skipped = (int(meta["cursor"]), spike_cursor)
        self.cursor = spike_cursor + 1
        self.timer.take()  # the discarded steps' time is not throughput
        self.rec.event(
            self.step,
            names.ROLLBACK,
            {
                "from_step": spike_step,
                "to_step": self.step,
                "checkpoint": path.name,
                "skipped_cursors": list(skipped),
                "lr_scale": self.lr_scale,
                "rollbacks": self.rollbacks,
            },
        )

    # -- evaluation ---------------------------------------------------------------------------
    @torch.no_grad()
    def evaluate(self) -> float:
        """Mean loss on the fixed held-out windows; ranks split them and sum (equal forward
        counts on every rank, padding with zero-weight windows, as sharded models need)."""
        if self.pipelined:
            total, count = self.par.eval_sums(self.data.eval_rows)
            return float(self.rt.sum(total) / self.rt.sum(count))
        rows, world, rank = self.data.eval_rows, self.rt.dp, self.rt.dp_rank
        n = len(rows)
        per = math.ceil(n / world)
        idx = [rank + k * world for k in range(per)]
        weight = torch.tensor([1.0 if i < n else 0.0 for i in idx], device=self.rt.device)
        idx = [i if i < n else 0 for i in idx]
        total = torch.zeros((), dtype=torch.float64, device=self.rt.device)
        count = torch.zeros((), dtype=torch.float64, device=self.rt.device)
        module = self.par.module
        module.eval()
        try:
            for s in range(0, per, self.data.micro):
                chunk = rows[idx[s : s + self.data.micro]].to(self.rt.device)
                w = weight[s : s + self.data.micro]
                with autocast(self.spec.precision, self.rt.device):
                    logits = module(chunk[:, :-1])
                loss = F.cross_entropy(
                    logits.float().reshape(-1, logits.size(-1)), chunk[:, 1:].reshape(-1), reduction="none"
                ).view(chunk.size(0), -1)
                total += (loss.sum(dim=1) * w).sum().double()
                count += w.sum().double() * loss.size(1)
        finally:
            module.train()
        total, count = self.rt.sum(total, self.par.group), self.rt.sum(count, self.par.group)
        return float(total / count)

    # -- the run ------------------------------------------------------------------------------
    def start(self) -> None:
        """Resume from the newest checkpoint, or branch, or write the first one; record the data event."""
        found = self._load()
        if found is None and self.par.init_weights is not None:  # no checkpoint loaded after all
            self.par.init_weights()
        self.par.init_weights = None
        if found is not None:
            path, _ = found
            self.resumed_from = self.step
            interval = self.spec.execution.eval_interval
            for step in range(interval, self.step + 1, interval) if self.watch is not None else ():
                self.watch.due(step)  # the checks before the checkpoint were made: the next ones come as they would
            self.rec.event(self.step, names.RESUME, {"checkpoint": path.name, "cursor": self.cursor, "attempt": self.attempt})
        else:
            if self.spec.branch is not None:
                self._branch_from_trunk()
            # A branch's first state: where it resumes without its trunk and what a spike before
            # its next checkpoint rolls back to. A run from the seed saves step 0 only when asked
            # (``keep_steps``): a spike before its first checkpoint draws the seed's weights again.
            if self.spec.branch is not None or self.pipelined or 0 in self.spec.execution.keep_steps:
                self._save()
        detail = {**self.data.corpus.describe(), "world_size": self.rt.world_size, "tp": self.rt.tp, "strategy": self.par.strategy,
                  "micro_batch": self.data.micro, "device": str(self.rt.device), "peak_flops": self.peak,
                  "attention": self._attention_kernel(),
                  "fused_optimizer": bool(self.optimizer.defaults.get("fused")),
                  "eval_tokens": int(self.data.eval_rows.shape[0] * self.spec.model.context),
                  "tasks": self.tasks.describe() if self.tasks is not None else {},
                  **getattr(self.par, "layout", {})}
        self.data_detail = detail  # what the run's data event recorded (device, attention kernel, layout)
        self.rec.event(self.step, names.DATA, detail)

    def _attention_kernel(self) -> str:
        """The attention kernel this run's forward passes use (see :func:`model.attention_kernel`)."""
        shape = self.spec.shape
        dtype = DTYPES[self.spec.precision] if self.spec.precision != "fp32" else torch.float32
        return attention_kernel(shape.d_model // shape.n_head, self.rt.device, dtype, compiled=self.spec.execution.compile)

    def _after_step(self) -> None:
        ex = self.spec.execution
        step, end = self.step, self.step == self.total_steps
        evaluated = saved = None
        if step % ex.eval_interval == 0 or end:
            self.last_eval = evaluated = self.evaluate()
            self.rec.metric(step, step * self.tokens_per_step, names.EVAL_LOSS, evaluated)
            self._score_tasks(step)
            if self.watch is not None and self.watch.due(step):  # one decision, rank 0's, on every rank
                self.stopped = self.rt.main_decides(lambda: self.watch.predict(step, evaluated))
        if step % ex.checkpoint_interval == 0 or end or step in ex.keep_steps or self.stopped is not None:
            # Metrics first: a checkpoint on disk must never be ahead of the steps in the database,
            # or a process killed between the two would resume past steps it never recorded.
            self.rec.flush()
            saved = self._save()
        if evaluated is not None or saved is not None:
            self.rec.flush()
            if self.report is not None:
                metrics = {"step": step, "tokens": step * self.tokens_per_step, "train_loss": self.window[-1]}
                if evaluated is not None:
                    metrics["eval_loss"] = evaluated
                self.report(step, metrics, str(saved) if saved is not None else None)

    def _score_tasks(self, step: int) -> None:
        """Downstream tasks at an evaluation, recorded as metrics."""
        for name, value in self.task_scores().items():
            self.rec.metric(step, step * self.tokens_per_step, name, value)

    def task_scores(self) -> dict[str, float]:
        """The run's tasks scored by the model being trained (`scaling.trainer.evaluation.evals`); collective over
        the ranks. A pipeline scores through its schedule, summed over its last stage's tensor column;
        any other layout through its model over its data-parallel group."""
        if self.tasks is None:
            return {}
        scorer, group = (self.par, self.par.loss_group) if self.pipelined else (self.par.model, self.par.group)
        return self.tasks.evaluate(scorer, self.rt, group)

    def step_once(self) -> None:
        """One optimizer step and what follows it (eval, checkpoint, report) — for benchmarks."""
        before = self.step
        self._train_step()
        if self.step > before:
            self._after_step()

    def fit(self) -> TrainResult:
        try:
            self.start()
            self.par.module.train()
            while self.step < self.total_steps and self.stopped is None:
                self.step_once()
            if self.last_eval is None:  # resumed from the final checkpoint of a finished run
                self.last_eval = self.evaluate()
            self.rec.flush()
            self._check_converged()
            if self.stopped is not None:  # with the run's stopped_step (the store sets it from the event)
                self.rec.event(self.stopped.step, names.STOPPED_EARLY, stop_record(self.stopped, self.spec, self.attempt)[1])
        except BaseException:
            # The caller (orchestrator or `scaling train`) records the failure and finishes the
            # run; the metrics gathered so far are kept.
            try:
                self.rec.flush()
            except Exception:  # the database may be what failed; keep the first error
                pass
            raise
        finally:
            if self._own_store and self.rec.store is not None:
                self.rec.store.close()
        return self.result()

    def _check_converged(self) -> None:
        """A run that ends worse than a uniform guess diverged: its loss measures the optimiser's
        failure, not what N parameters learn from D tokens, so it fails instead of reaching the fits."""
        uniform = math.log(self.spec.model.vocab_size)
        loss = self.last_eval
        if loss is not None and math.isfinite(loss) and loss <= uniform + DIVERGED_NATS:
            return
        raise TrainingError(
            f"run {self.key} diverged: its final eval loss {loss:.4g} is above ln({self.spec.model.vocab_size}) = "
            f"{uniform:.3g}, what a uniform guess scores ({self.overflow_skips} of {self.step} steps skipped for "
            f"non-finite gradients); lower train.optimizer.lr (now {self.spec.optimizer.lr:g})"
        )

    def _watch(self, store_url: Optional[str], sweep: Optional[str]) -> Optional[Watch]:
        """The run's early stopping (None without ``early_stop``, or without references to predict
        from): rank 0 reads the sweep's finished curves once; every rank learns whether there are any."""
        if self.spec.early_stop is None:
            return None
        refs: list[Reference] = []

        def read() -> bool:
            refs.extend(references(store_url, sweep, self.spec) if store_url else [])
            return bool(refs)

        return Watch.of(self.spec, refs) if self.rt.main_decides(read) else None

    def result(self) -> TrainResult:
        tokens, stopped = self.step * self.tokens_per_step, self.stopped
        return TrainResult(
            key=self.key,
            status=names.COMPLETED if self.step >= self.total_steps or stopped is not None else names.INTERRUPTED,
            steps=self.step,
            tokens=tokens,
            flops=tokens * self.spec.flops_per_token,
            final_train_loss=sum(self.recent) / len(self.recent) if self.recent else None,
            final_eval_loss=stopped.loss if stopped is not None else self.last_eval,  # the predicted final
            rollbacks=self.rollbacks,
            overflow_skips=self.overflow_skips,
            epochs=self.data.batches.epoch(self.cursor),
            resumed_from=self.resumed_from,
            run_dir=str(self.run_dir),
            data={**self.data.corpus.describe(),
                  **({"stopped_early": stop_record(stopped, self.spec, self.attempt)[0]} if stopped else {})},
        )

