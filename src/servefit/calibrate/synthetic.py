"""A synthetic serving step for a real architecture: a stack of the model's own layer shapes
with random weights, built directly on the device, with a static KV cache.

Only as many layers as fit the time and memory budget are built; a step of the whole model
is extrapolated as (time of the stack / layers built) x the model's layers + the LM head
(timed on its own), and reports say so. Supported: softmax attention (MHA/GQA/MQA, sliding
windows are run as full attention over the window) with dense or MoE MLPs. MLA, linear
attention and Mamba layers are not built (the microbenchmarks still run).

The weights are random (``randn x 0.02``), never zeros; the KV cache holds random values
(a decode step at context C attends C cached tokens, whatever they are).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from servefit.calibrate.measure import Budget, Device, import_torch, time_s
from servefit.core.model_spec import AttentionSpec, DenseMlpSpec, LayerSpec, ModelSpec, MoeSpec
from servefit.errors import InvalidArgumentError

INIT_SCALE = 0.02


def check_supported(spec: ModelSpec) -> None:
    for i, layer in enumerate(spec.layers):
        if not isinstance(layer.mixer, AttentionSpec):
            kind = layer.mixer.kind.value if layer.mixer else "no mixer"
            raise InvalidArgumentError(
                f"{spec.name}: layer {i} is {kind}; the synthetic step builds softmax-attention "
                "layers with dense or MoE MLPs only (the microbenchmarks still apply)"
            )


def _rand(torch: Any, *shape: int, device: Any, dtype: Any) -> Any:
    return torch.randn(*shape, device=device, dtype=dtype) * INIT_SCALE


class _Layer:
    """One decoder layer: RMSNorm, fused QKV, SDPA over a static cache, O, norm, MLP."""

    def __init__(
        self, layer: LayerSpec, hidden: int, device: Device, dtype: Any, batch: int, ctx: int
    ) -> None:
        torch = import_torch()
        a = layer.mixer
        assert isinstance(a, AttentionSpec)  # checked by check_supported
        dev = device.torch_device
        self.heads, self.kv_heads, self.head_dim = a.num_q_heads, a.num_kv_heads, a.head_dim
        q_width = a.num_q_heads * a.head_dim
        kv_width = a.num_kv_heads * a.head_dim
        self.wqkv = _rand(torch, hidden, q_width + 2 * kv_width, device=dev, dtype=dtype)
        self.wo = _rand(torch, q_width, hidden, device=dev, dtype=dtype)
        shape = (batch, a.num_kv_heads, ctx, a.head_dim)
        self.k_cache = _rand(torch, *shape, device=dev, dtype=dtype)
        self.v_cache = _rand(torch, *shape, device=dev, dtype=dtype)
        mlp = layer.mlp
        self.moe: MoeSpec | None = mlp if isinstance(mlp, MoeSpec) else None
        if isinstance(mlp, DenseMlpSpec):
            width = mlp.intermediate_size
            self.w_up = _rand(
                torch, hidden, width * (2 if mlp.is_gated else 1), device=dev, dtype=dtype
            )
            self.w_down = _rand(torch, width, hidden, device=dev, dtype=dtype)
            self.gated = mlp.is_gated
        elif self.moe is not None:
            e, width = self.moe.num_experts, self.moe.expert_intermediate_size
            self.router = _rand(torch, hidden, e, device=dev, dtype=dtype)
            self.w13 = _rand(torch, e, hidden, 2 * width, device=dev, dtype=dtype)
            self.w2 = _rand(torch, e, width, hidden, device=dev, dtype=dtype)
            shared = self.moe.shared_intermediate_size
            self.shared_up = (
                _rand(torch, hidden, 2 * shared, device=dev, dtype=dtype) if shared else None
            )
            self.shared_down = (
                _rand(torch, shared, hidden, device=dev, dtype=dtype) if shared else None
            )
        self.norm = torch.ones(hidden, device=dev, dtype=dtype)

    def _rms(self, x: Any) -> Any:
        torch = import_torch()
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.norm

    def _mlp(self, h: Any) -> Any:
        torch = import_torch()
        import torch.nn.functional as F  # noqa: N812

        if self.moe is None:
            up = h @ self.w_up
            if self.gated:
                gate, up = up.chunk(2, dim=-1)
                up = F.silu(gate) * up
            else:
                up = F.relu(up).square()
            return up @ self.w_down
        flat = h.reshape(-1, h.shape[-1])
        weights, experts = torch.topk(
            torch.softmax(flat @ self.router, dim=-1), self.moe.num_experts_per_token
        )
        out = torch.zeros_like(flat)
        for e in torch.unique(experts).tolist():
            rows, slot = (experts == e).nonzero(as_tuple=True)
            gate, up = (flat[rows] @ self.w13[e]).chunk(2, dim=-1)
            y = (F.silu(gate) * up) @ self.w2[e]
            out.index_add_(0, rows, y * weights[rows, slot].unsqueeze(-1))
        if self.shared_up is not None:
            gate, up = (flat @ self.shared_up).chunk(2, dim=-1)
            out = out + (F.silu(gate) * up) @ self.shared_down
        return out.reshape(h.shape)

    def forward(self, x: Any, start: int) -> Any:
        """``x``: [batch, tokens, hidden]; tokens enter the cache at position ``start``."""
        import torch.nn.functional as F  # noqa: N812

        b, t, _ = x.shape
        qkv = self._rms(x) @ self.wqkv
        qw, kw = self.heads * self.head_dim, self.kv_heads * self.head_dim
        q = qkv[..., :qw].view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k = qkv[..., qw : qw + kw].view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        v = qkv[..., qw + kw :].view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        self.k_cache[:b, :, start : start + t] = k
        self.v_cache[:b, :, start : start + t] = v
        attn = F.scaled_dot_product_attention(
            q,
            self.k_cache[:b, :, : start + t],
            self.v_cache[:b, :, : start + t],
            is_causal=t > 1 and start == 0,
            enable_gqa=self.kv_heads != self.heads,
        )
        x = x + attn.transpose(1, 2).reshape(b, t, qw) @ self.wo
        return x + self._mlp(self._rms(x))


@dataclass(frozen=True, slots=True)
class StepTiming:
    label: str
    kind: str  # prefill or decode
    batch: int
    tokens: int  # new tokens per sequence
    context: int  # cached tokens before the step
    stack_s: float  # the built layers
    lm_head_s: float
    layers_built: int
    layers_total: int

    @property
    def model_step_s(self) -> float:
        """The whole model, extrapolated per layer."""
        return self.stack_s / self.layers_built * self.layers_total + self.lm_head_s


class SyntheticModel:
    """``num_layers`` layers cycling through the model's own layer shapes."""

    def __init__(
        self, spec: ModelSpec, device: Device, *, num_layers: int, max_batch: int, max_ctx: int
    ) -> None:
        torch = import_torch()
        check_supported(spec)
        if num_layers < 1:
            raise InvalidArgumentError("the synthetic stack needs at least one layer")
        self.spec, self.device = spec, device
        self.dtype = (
            torch.float32
            if device.backend == "cpu" and spec.dtype == "float32"
            else (torch.float16 if spec.dtype == "float16" else torch.bfloat16)
        )
        count = min(num_layers, spec.num_layers)
        self.layers = [
            _Layer(spec.layers[i], spec.hidden_size, device, self.dtype, max_batch, max_ctx)
            for i in range(count)
        ]
        self.lm_head = _rand(
            torch, spec.hidden_size, spec.vocab_size, device=device.torch_device, dtype=self.dtype
        )
        self.max_batch, self.max_ctx = max_batch, max_ctx

    def time_step(
        self, *, batch: int, tokens: int, context: int, budget: Budget, label: str = ""
    ) -> StepTiming:
        torch = import_torch()
        if batch > self.max_batch or context + tokens > self.max_ctx:
            raise InvalidArgumentError(
                f"step {label}: batch {batch} x {context + tokens} tokens exceeds the cache "
                f"({self.max_batch} x {self.max_ctx})"
            )
        dev, h = self.device.torch_device, self.spec.hidden_size
        xs = [
            torch.randn(batch, tokens, h, device=dev, dtype=self.dtype)
            for _ in range(budget.rotate)
        ]
        sampled = [
            torch.randn(batch, h, device=dev, dtype=self.dtype) for _ in range(budget.rotate)
        ]

        def stack(i: int) -> Any:
            x = xs[i % budget.rotate]
            with torch.inference_mode():
                for layer in self.layers:
                    x = layer.forward(x, context)
            return x

        def head(i: int) -> Any:
            with torch.inference_mode():
                return sampled[i % budget.rotate] @ self.lm_head

        stack_s = time_s(
            stack, self.device, warmup=budget.warmup, repeats=budget.repeats, clock=budget.clock
        )
        head_s = time_s(
            head, self.device, warmup=budget.warmup, repeats=budget.repeats, clock=budget.clock
        )
        return StepTiming(
            label=label or f"{'prefill' if tokens > 1 else 'decode'} b{batch} t{tokens} c{context}",
            kind="prefill" if tokens > 1 else "decode",
            batch=batch,
            tokens=tokens,
            context=context,
            stack_s=stack_s,
            lm_head_s=head_s,
            layers_built=len(self.layers),
            layers_total=self.spec.num_layers,
        )
