"""The mixture-of-experts family's decoder and its Hugging Face export: architecture only.

The Llama decoder (``scaling.trainer.families.llama``) whose MLP, after the first
``n_dense_layers`` blocks, is a routed mixture of SwiGLU experts (Shazeer et al. 2017; Fedus et
al. 2021, Switch; Jiang et al. 2024, Mixtral; Dai et al. 2024, DeepSeek-MoE), counted by
``scaling.families.MoE``:

* the router, a linear layer of ``n_experts`` logits per token, scored by a softmax over the
  experts or a sigmoid per expert; each token goes to its ``top_k`` best experts, weighted by
  their scores renormalized to sum to 1; ``n_shared_experts`` experts (one SwiGLU of
  n_shared x expert_ffn) take every token besides;
* dropless: every token reaches its experts (no capacity, nothing dropped); the tokens are sorted
  by expert and each expert multiplies its contiguous slice. ``torch._grouped_mm`` would do all
  experts in one call, but its backward fails on the CPU in FP32 (torch 2.13: "Invalid
  strides/sizes"), so the experts run in a loop;
* balance: with ``balance: aux_loss`` Switch's loss, coefficient x E x sum_i f_i P_i (f_i the
  share of routed slots expert i got, P_i its mean score), averaged over the MoE blocks; with
  ``balance: bias`` DeepSeek-V3's auxiliary-loss-free update: a per-expert bias added to the
  scores only to choose the top-k, moved by ``bias_rate`` x sign(mean load - load) after every
  step (:func:`update_balance_bias`); with ``router_z_loss`` ST-MoE's (log Z)^2 on the router's logits.

Each MoE layer keeps, from its last forward pass, its auxiliary loss (with its gradient) and the
tokens each expert took; the loop reads them (:func:`router_state`) and records the load as metrics.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Iterator

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from scaling.accounting import Shape
from scaling.errors import UserError
from scaling.trainer.families.llama import (
    HF_ATTENTION_NAMES,
    HF_MLP_NAMES,
    HF_QK_NORM_NAMES,
    Block,
    Llama,
    SwiGLU,
    hf_outer_state_dict,
    llama_config,
)

if TYPE_CHECKING:
    from torch.autograd.function import FunctionCtx
    from torch.distributed.device_mesh import DeviceMesh

    from scaling.trainer.families.model import Decoder


class Experts(nn.Module):
    """``n_experts`` SwiGLU experts as stacked matrices (out, in per expert, nn.Linear's layout):
    ``gate`` and ``up`` (E, f, d), ``down`` (E, d, f). Empty on construction (their values are
    ``init_ops``'s), so building one draws no random numbers. Under expert parallelism
    (:meth:`shard_experts`) each rank holds a slice of the experts and the routed tokens travel
    to their experts' rank and back (``scaling.trainer.parallel.expert_parallel``)."""

    def __init__(self, n_experts: int, d_model: int, hidden: int) -> None:
        super().__init__()
        self.n_experts = n_experts
        self.gate = nn.Parameter(torch.empty(n_experts, hidden, d_model))
        self.up = nn.Parameter(torch.empty(n_experts, hidden, d_model))
        self.down = nn.Parameter(torch.empty(n_experts, d_model, hidden))
        self.ep_group: Any = None

    def shard_experts(self, mesh: DeviceMesh) -> list[str]:
        """Each rank of the 1-D ``mesh`` keeps its slice of the experts (DTensors sharded on dim 0);
        the names of the parameters sharded."""
        from torch.distributed.tensor import Shard, distribute_tensor

        for name in ("gate", "up", "down"):
            full = getattr(self, name)
            setattr(self, name, nn.Parameter(distribute_tensor(full.data, mesh, [Shard(0)], src_data_rank=None)))
        self.ep_group = mesh.get_group()
        return ["gate", "up", "down"]

    def forward(self, x: torch.Tensor, experts: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        """The weighted sum of each token's experts: ``x`` (T, d), ``experts`` and ``weights`` (T, k)."""
        k = experts.size(1)
        flat = experts.reshape(-1)
        order = flat.argsort(stable=True)  # the routed slots sorted by expert
        tokens = order // k
        counts = torch.bincount(flat, minlength=self.n_experts)
        xs = x[tokens]
        if self.ep_group is None:
            sizes = counts.tolist()
            outputs = [_swiglu(chunk, self.gate[e], self.up[e], self.down[e])
                       for e, chunk in enumerate(xs.split(sizes)) if sizes[e]]
            routed = torch.cat(outputs)
        else:
            from scaling.trainer.parallel.expert_parallel import dispatch_and_combine

            scale = 1.0 / dist.get_world_size(self.ep_group)  # DDP averages the other gradients over the ranks
            gate, up, down = (ScaleGrad.apply(p.to_local(), scale) for p in (self.gate, self.up, self.down))
            routed = dispatch_and_combine(xs, counts, self.ep_group, lambda j, rows: _swiglu(rows, gate[j], up[j], down[j]))
        routed = routed * weights.reshape(-1)[order, None].to(routed.dtype)
        return torch.zeros((x.size(0), x.size(1)), dtype=routed.dtype, device=x.device).index_add_(0, tokens, routed)


def _swiglu(rows: torch.Tensor, gate: torch.Tensor, up: torch.Tensor, down: torch.Tensor) -> torch.Tensor:
    return (F.silu(rows @ gate.t()) * (rows @ up.t())) @ down.t()


class ScaleGrad(torch.autograd.Function):
    """Identity forward; the gradient times ``scale`` in backward."""

    @staticmethod
    def forward(ctx: FunctionCtx, x: torch.Tensor, scale: float) -> torch.Tensor:
        ctx.scale = scale
        return x.view_as(x)

    @staticmethod
    def backward(ctx: FunctionCtx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad * ctx.scale, None


class MoE(nn.Module):
    """The router, the routed experts and the shared ones (see the module's docstring)."""

    def __init__(self, cfg: Shape) -> None:
        super().__init__()
        assert cfg.n_experts is not None and cfg.top_k is not None and cfg.expert_ffn is not None
        self.top_k = cfg.top_k
        self.score = cfg.router
        self.cfg = cfg
        self.router = nn.Linear(cfg.d_model, cfg.n_experts, bias=False)
        self.experts = Experts(cfg.n_experts, cfg.d_model, cfg.expert_ffn)
        self.shared = SwiGLU(_shared_shape(cfg)) if cfg.n_shared_experts else None
        #: DeepSeek-V3's selection bias (``balance: bias``): a buffer (state, not trained), zero at first.
        self.register_buffer("balance_bias", torch.zeros(cfg.n_experts))
        #: From the last forward pass: the auxiliary loss (balance and z-loss) and the tokens per expert.
        self.aux_loss: torch.Tensor | None = None
        self.load: torch.Tensor | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        flat = x.reshape(-1, d)
        logits = self.router(flat).float()
        scores = logits.softmax(dim=-1) if self.score == "softmax" else logits.sigmoid()
        choice = scores + self.balance_bias if self.cfg.balance == "bias" else scores
        experts = choice.topk(self.top_k, dim=-1).indices
        weights = scores.gather(-1, experts)
        weights = weights / weights.sum(dim=-1, keepdim=True)
        out = self.experts(flat, experts, weights)
        if self.shared is not None:
            out = out + self.shared(flat)
        self.load = torch.bincount(experts.reshape(-1), minlength=scores.size(-1)).detach()
        self.aux_loss = self._aux_loss(logits, scores, self.load)
        return out.view(b, t, -1).to(x.dtype)

    def _aux_loss(self, logits: torch.Tensor, scores: torch.Tensor, load: torch.Tensor) -> torch.Tensor:
        cfg = self.cfg
        aux = logits.new_zeros(())
        if cfg.balance == "aux_loss" and cfg.aux_loss:
            n = scores.size(-1)
            share = load.float() / load.sum()  # f_i: the routed slots' share of each expert
            probs = (scores / scores.sum(dim=-1, keepdim=True)).mean(dim=0)  # P_i
            aux = aux + cfg.aux_loss * n * (share * probs).sum()
        if cfg.router_z_loss:
            aux = aux + cfg.router_z_loss * torch.logsumexp(logits, dim=-1).pow(2).mean()
        return aux


def _shared_shape(cfg: Shape) -> Shape:
    """A shape whose dense SwiGLU is the shared experts' (n_shared x expert_ffn wide)."""
    assert cfg.expert_ffn is not None
    return Shape(1, cfg.d_model, cfg.n_head, family="llama", n_kv_head=cfg.kv_heads,
                 ffn=cfg.n_shared_experts * cfg.expert_ffn)


class MoEDecoder(Llama):
    """The Llama decoder with :class:`MoE` MLPs after its first ``n_dense_layers`` blocks."""

    family = "moe"

    def make_block(self, cfg: Shape, index: int) -> nn.Module:
        return Block(cfg, SwiGLU if index < cfg.n_dense_layers else MoE)


#: The decoder this family builds.
MODEL = MoEDecoder


def moe_layers(model: nn.Module) -> Iterator[MoE]:
    """The MoE layers of ``model`` (wrapped or not), in order."""
    return (m for m in model.modules() if isinstance(m, MoE))


def router_state(model: nn.Module) -> tuple[torch.Tensor, torch.Tensor] | None:
    """From the last forward pass: the auxiliary loss averaged over the MoE layers (with its
    gradient) and the tokens each expert took, (layers, E); None for a model without experts."""
    layers = list(moe_layers(model))
    if not layers or any(layer.aux_loss is None or layer.load is None for layer in layers):
        return None
    aux = torch.stack([layer.aux_loss for layer in layers]).mean()  # type: ignore[misc]
    return aux, torch.stack([layer.load for layer in layers])  # type: ignore[misc]


@torch.no_grad()
def update_balance_bias(model: nn.Module, load: torch.Tensor) -> None:
    """DeepSeek-V3's balancing step for ``balance: bias``: each layer's bias moves by ``bias_rate``
    toward its under-loaded experts, b_i += rate x sign(mean load - load_i), ``load`` (layers, E)
    being the step's tokens per expert summed over the data-parallel ranks, so every rank moves
    its biases alike."""
    layers = [layer for layer in moe_layers(model) if layer.cfg.balance == "bias"]
    if not layers:
        return
    for layer, counts in zip(layers, load):
        layer.balance_bias.add_(layer.cfg.bias_rate * torch.sign(counts.mean() - counts).to(layer.balance_bias.dtype))


class RouterStats:
    """What the loop asks of the router of a run of this family: per micro-batch the auxiliary
    loss to add to it (:meth:`micro_batch_loss`), per step the tokens each expert took (summed
    over the micro-batches and the data-parallel ranks), DeepSeek-V3's bias update, and the
    step's metrics as one tensor that travels to the host with the step's loss (:meth:`end_step`,
    :meth:`metrics`)."""

    def __init__(self, model: nn.Module) -> None:
        self.model = model
        self.load: torch.Tensor | None = None
        self.aux = torch.zeros(())

    def micro_batch_loss(self, weight: float) -> torch.Tensor:
        """The auxiliary loss of the forward pass just run; its share ``weight`` of the batch is
        added to the step's mean."""
        state = router_state(self.model)
        assert state is not None, "a model of the moe family ran no MoE layer"
        aux, load = state
        self.load = load if self.load is None else self.load + load
        self.aux = self.aux.to(aux.device) + aux.detach() * weight
        return aux

    def discard(self) -> None:
        """Forget what the micro-batches of a void step (rolled back) counted."""
        self.load, self.aux = None, torch.zeros(())

    def end_step(self, total: Callable[[torch.Tensor, dist.ProcessGroup | None], torch.Tensor],
                 group: dist.ProcessGroup | None) -> torch.Tensor:
        """After the optimizer's step: the step's load summed over ``group`` by ``total`` (a sum
        over ranks), the balancing biases moved, and (aux, load per layer and expert) as one tensor."""
        assert self.load is not None
        load = total(self.load.float(), group)
        update_balance_bias(self.model, load)
        aux = total(self.aux.float(), group)
        packed = torch.cat([aux.reshape(1), load.reshape(-1)])
        self.discard()
        return packed

    @staticmethod
    def metrics(packed: list[float], n_experts: int) -> dict[str, float]:
        """The metrics of a step's packed values (read on the host): the auxiliary loss, the
        balance (busiest and idlest expert over the mean, extremes over the layers) and the
        tokens of each expert summed over the layers."""
        from scaling import vocab

        aux, flat = packed[0], packed[1:]
        layers = [flat[i:i + n_experts] for i in range(0, len(flat), n_experts)]
        ratios = [(max(row) / mean, min(row) / mean) for row in layers if (mean := sum(row) / n_experts) > 0]
        out = {vocab.MOE_AUX_LOSS: aux}
        if ratios:
            out[vocab.MOE_LOAD_MAX] = max(r[0] for r in ratios)
            out[vocab.MOE_LOAD_MIN] = min(r[1] for r in ratios)
        for e in range(n_experts):
            out[vocab.expert_tokens_metric(e)] = sum(row[e] for row in layers)
        return out


# -- Hugging Face ---------------------------------------------------------------------------------


def hf_target(shape: Shape) -> str:
    """The ``transformers`` class that computes ``shape`` exactly, or UserError naming what none can:
    Mixtral (softmax router, renormalized top-k, no shared experts, every block sparse), or
    Qwen3-MoE with ``qk_norm`` (which also keeps dense first layers)."""
    problems = []
    if shape.router != "softmax":
        problems.append(f"router {shape.router} (their routers are softmax)")
    if shape.balance == "bias":
        problems.append("balance bias (they choose experts by score alone)")
    if shape.n_shared_experts:
        problems.append("shared experts (neither has ungated ones)")
    if shape.n_dense_layers and not shape.qk_norm:
        problems.append("dense first layers without qk_norm (Mixtral has none; Qwen3-MoE has qk_norm)")
    if problems:
        raise UserError(f"this moe run cannot be exported to Hugging Face's Mixtral or Qwen3-MoE: {'; '.join(problems)}")
    return "Qwen3MoeForCausalLM" if shape.qk_norm else "MixtralForCausalLM"


def hf_config(shape: Shape) -> dict[str, Any]:
    """The target's configuration fields for ``shape``."""
    config = llama_config(shape)
    for name in ("mlp_bias", "pretraining_tp", "use_sliding_window"):
        config.pop(name, None)
    config["num_experts_per_tok"] = shape.top_k
    if shape.qk_norm:
        config.update(num_experts=shape.n_experts, moe_intermediate_size=shape.expert_ffn, norm_topk_prob=True,
                      decoder_sparse_step=1, mlp_only_layers=list(range(shape.n_dense_layers)), use_sliding_window=False)
    else:
        config.update(num_local_experts=shape.n_experts, intermediate_size=shape.expert_ffn, router_jitter_noise=0.0)
    return config


def hf_state_dict(ours: dict[str, torch.Tensor], shape: Shape) -> dict[str, torch.Tensor]:
    """Our weights under the target's names: the router is ``mlp.gate``, the experts' gate and up
    matrices stacked as ``gate_up_proj`` (E, 2f, d), ``down`` as ``down_proj``."""
    out = hf_outer_state_dict(ours)
    for i in range(shape.n_layer):
        src, dst = f"blocks.{i}.", f"model.layers.{i}."
        names = {**HF_ATTENTION_NAMES, **(HF_QK_NORM_NAMES if shape.qk_norm else {})}
        if i < shape.n_dense_layers:
            names.update(HF_MLP_NAMES)
        else:
            out[dst + "mlp.gate.weight"] = ours[src + "mlp.router.weight"]
            out[dst + "mlp.experts.gate_up_proj"] = torch.cat(
                [ours[src + "mlp.experts.gate"], ours[src + "mlp.experts.up"]], dim=1)
            out[dst + "mlp.experts.down_proj"] = ours[src + "mlp.experts.down"]
        for a, b in names.items():
            out[f"{dst}{b}.weight"] = ours[f"{src}{a}.weight"]
    return out


def to_hf(model: "Decoder") -> Any:
    """A ``MixtralForCausalLM`` (``Qwen3MoeForCausalLM`` with qk-norm) with ``model``'s weights
    (fp32, eval mode); UserError for a shape neither computes (:func:`hf_target`)."""
    from scaling.trainer.export import require_transformers

    shape = model.cfg
    target = hf_target(shape)
    transformers = require_transformers()
    config_class = transformers.Qwen3MoeConfig if target.startswith("Qwen3") else transformers.MixtralConfig
    hf = getattr(transformers, target)(config_class(**hf_config(shape))).float()
    hf.load_state_dict(hf_state_dict(model.state_dict(), shape), strict=True)
    if shape.tied:
        hf.tie_weights()
    return hf.eval()
