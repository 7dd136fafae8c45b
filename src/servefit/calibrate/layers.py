"""The synthetic stack's attention and MLP blocks, in plain PyTorch with random weights.

Each block stands in for what vLLM runs for that layer kind, doing the work
:mod:`servefit.core.op_rows` counts for it (the same FLOPs and the same cache bytes), not the
same kernels:

- :class:`Attention`: softmax attention (MHA/GQA/MQA) with ``scaled_dot_product_attention``
  over a static KV cache, as FlashAttention/FlashInfer does; a sliding window (or Llama 4's
  chunked attention) reads only the last W keys, so the L^2 term is capped as the rows cap it;
- :class:`Mla`: DeepSeek's multi-head latent attention: the cache holds one latent per token;
  decode runs in the absorbed form (queries projected into the latent, as FlashMLA does),
  prefill in the expanded form (the cached latents up-projected to K and V, then SDPA);
- :class:`Mlp` (dense, gated or not) and :class:`Moe` (top-k routed experts looped over the
  experts the tokens touch, plus the shared expert), as vLLM's fused MoE does.
"""

from __future__ import annotations

from typing import Any

from servefit.calibrate.measure import Device, import_torch
from servefit.core.model_spec import AttentionSpec, DenseMlpSpec, MlaSpec, MoeSpec

INIT_SCALE = 0.02


def rand(torch: Any, *shape: int, device: Any, dtype: Any) -> Any:
    """Random weights (``randn x 0.02``), never zeros."""
    return torch.randn(*shape, device=device, dtype=dtype) * INIT_SCALE


class Attention:
    """Fused QKV (and Qwen3-Next's output gate), SDPA over a static cache, O projection."""

    def __init__(
        self, a: AttentionSpec, hidden: int, device: Device, dtype: Any, batch: int, ctx: int
    ) -> None:
        torch = import_torch()
        dev = device.torch_device
        self.heads, self.kv_heads = a.num_q_heads, a.num_kv_heads
        self.head_dim, self.v_dim = a.head_dim, a.value_head_dim
        self.window = a.sliding_window_tokens or a.attention_chunk_tokens
        self.q_width = a.num_q_heads * a.head_dim
        self.k_width = a.num_kv_heads * a.head_dim
        self.v_width = a.num_kv_heads * a.value_head_dim
        self.gated = a.has_output_gate
        gate_width = a.num_q_heads * a.value_head_dim if self.gated else 0
        width = self.q_width + self.k_width + self.v_width + gate_width
        self.wqkv = rand(torch, hidden, width, device=dev, dtype=dtype)
        self.wo = rand(torch, a.num_q_heads * a.value_head_dim, hidden, device=dev, dtype=dtype)
        self.k_cache = rand(torch, batch, a.num_kv_heads, ctx, a.head_dim, device=dev, dtype=dtype)
        self.v_cache = rand(
            torch, batch, a.num_kv_heads, ctx, a.value_head_dim, device=dev, dtype=dtype
        )

    def _sdpa(self, q: Any, k: Any, v: Any, *, causal: bool, mask: Any = None) -> Any:
        import torch.nn.functional as F  # noqa: N812

        return F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, is_causal=causal, enable_gqa=self.kv_heads != self.heads
        )

    def _windowed_prefill(self, q: Any, start: int, end: int) -> Any:
        """Queries in blocks of W, each over the keys its window reaches (about W x 2W)."""
        torch = import_torch()
        w, t, dev = self.window or 1, q.shape[2], q.device
        out = []
        for s in range(0, t, w):
            e = min(s + w, t)
            q_pos = torch.arange(start + s, start + e, device=dev)
            k_lo = max(0, start + s - w + 1)
            k_pos = torch.arange(k_lo, start + e, device=dev)
            mask = (k_pos[None, :] <= q_pos[:, None]) & (k_pos[None, :] > q_pos[:, None] - w)
            k = self.k_cache[: q.shape[0], :, k_lo : start + e]
            v = self.v_cache[: q.shape[0], :, k_lo : start + e]
            out.append(self._sdpa(q[:, :, s:e], k, v, causal=False, mask=mask))
        return torch.cat(out, dim=2)

    def forward(self, h: Any, start: int) -> Any:
        """``h``: normed [batch, tokens, hidden]; tokens enter the cache at ``start``."""
        torch = import_torch()
        b, t, _ = h.shape
        qkv = h @ self.wqkv
        qw, kw, vw = self.q_width, self.k_width, self.v_width
        q = qkv[..., :qw].view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k = qkv[..., qw : qw + kw].view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        v = qkv[..., qw + kw : qw + kw + vw].view(b, t, self.kv_heads, self.v_dim).transpose(1, 2)
        end = start + t
        self.k_cache[:b, :, start:end] = k
        self.v_cache[:b, :, start:end] = v
        if self.window is not None and t > 1 and end > self.window:
            attn = self._windowed_prefill(q, start, end)
        else:
            lo = max(0, end - self.window) if self.window is not None else 0
            attn = self._sdpa(
                q,
                self.k_cache[:b, :, lo:end],
                self.v_cache[:b, :, lo:end],
                causal=t > 1 and start == 0,
            )
        out = attn.transpose(1, 2).reshape(b, t, self.heads * self.v_dim)
        if self.gated:
            out = out * torch.sigmoid(qkv[..., qw + kw + vw :])
        return out @ self.wo


class Mla:
    """Latent cache of ``kv_lora_rank + rope`` per token; absorbed decode, expanded prefill."""

    def __init__(
        self, a: MlaSpec, hidden: int, device: Device, dtype: Any, batch: int, ctx: int
    ) -> None:
        torch = import_torch()
        dev = device.torch_device
        self.a = a
        h, nope, rope, r = a.num_heads, a.qk_nope_head_dim, a.qk_rope_head_dim, a.kv_lora_rank
        q_in = a.q_lora_rank or hidden
        self.wq_a = (
            rand(torch, hidden, a.q_lora_rank, device=dev, dtype=dtype) if a.q_lora_rank else None
        )
        self.wq_b = rand(torch, q_in, h * (nope + rope), device=dev, dtype=dtype)
        self.wkv_a = rand(torch, hidden, r + rope, device=dev, dtype=dtype)
        self.w_uk = rand(torch, h, nope, r, device=dev, dtype=dtype)  # kv_b_proj, K half
        self.w_uv = rand(torch, h, r, a.v_head_dim, device=dev, dtype=dtype)  # V half
        self.wo = rand(torch, h * a.v_head_dim, hidden, device=dev, dtype=dtype)
        self.cache = rand(torch, batch, ctx, r + rope, device=dev, dtype=dtype)

    def forward(self, x: Any, start: int) -> Any:
        torch = import_torch()
        import torch.nn.functional as F  # noqa: N812

        a = self.a
        b, t, _ = x.shape
        h, nope, rope, r = a.num_heads, a.qk_nope_head_dim, a.qk_rope_head_dim, a.kv_lora_rank
        q_in = x @ self.wq_a if self.wq_a is not None else x
        q = (q_in @ self.wq_b).view(b, t, h, nope + rope).transpose(1, 2)  # [b, h, t, qk]
        end = start + t
        self.cache[:b, start:end] = x @ self.wkv_a
        latent = self.cache[:b, :end]  # [b, keys, r + rope]
        if t == 1:  # absorbed: scores against the latent, values read from it
            q_lat = torch.einsum("bhtn,hnr->bhtr", q[..., :nope], self.w_uk)
            q_full = torch.cat([q_lat, q[..., nope:]], dim=-1)
            kv = latent.unsqueeze(1)  # one latent "head" shared by every query head
            o_lat = F.scaled_dot_product_attention(
                q_full, kv, kv[..., :r], enable_gqa=True, scale=(nope + rope) ** -0.5
            )
            o = torch.einsum("bhtr,hrv->bhtv", o_lat, self.w_uv)
        else:  # expanded: up-project every cached latent to per-head K and V
            c = latent[..., :r]
            k_nope = torch.einsum("bkr,hnr->bhkn", c, self.w_uk)
            v = torch.einsum("bkr,hrv->bhkv", c, self.w_uv)
            k_rope = latent[..., r:].unsqueeze(1).expand(b, h, end, rope)
            k = torch.cat([k_nope, k_rope], dim=-1)
            o = F.scaled_dot_product_attention(q, k, v, is_causal=start == 0)
        return o.transpose(1, 2).reshape(b, t, h * a.v_head_dim) @ self.wo


class Mlp:
    """Gated (SwiGLU) or plain (relu^2) dense MLP."""

    def __init__(self, mlp: DenseMlpSpec, hidden: int, device: Device, dtype: Any) -> None:
        torch = import_torch()
        dev, width = device.torch_device, mlp.intermediate_size
        self.gated = mlp.is_gated
        self.w_up = rand(torch, hidden, width * (2 if self.gated else 1), device=dev, dtype=dtype)
        self.w_down = rand(torch, width, hidden, device=dev, dtype=dtype)

    def forward(self, h: Any) -> Any:
        import torch.nn.functional as F  # noqa: N812

        up = h @ self.w_up
        if self.gated:
            gate, up = up.chunk(2, dim=-1)
            up = F.silu(gate) * up
        else:
            up = F.relu(up).square()
        return up @ self.w_down


class Moe:
    """Router, top-k experts (each expert runs on the tokens routed to it), shared expert."""

    def __init__(self, moe: MoeSpec, hidden: int, device: Device, dtype: Any) -> None:
        torch = import_torch()
        dev = device.torch_device
        self.moe = moe
        e, width = moe.num_experts, moe.expert_intermediate_size
        up = 2 * width if moe.is_gated else width
        self.router = rand(torch, hidden, e, device=dev, dtype=dtype)
        self.w13 = rand(torch, e, hidden, up, device=dev, dtype=dtype)
        self.w2 = rand(torch, e, width, hidden, device=dev, dtype=dtype)
        shared = moe.shared_intermediate_size
        self.shared = (
            Mlp(
                DenseMlpSpec(intermediate_size=shared, is_gated=moe.is_gated), hidden, device, dtype
            )
            if shared
            else None
        )

    def _expert(self, e: int, x: Any) -> Any:
        import torch.nn.functional as F  # noqa: N812

        up = x @ self.w13[e]
        if self.moe.is_gated:
            gate, up = up.chunk(2, dim=-1)
            return (F.silu(gate) * up) @ self.w2[e]
        return F.relu(up).square() @ self.w2[e]

    def forward(self, h: Any) -> Any:
        torch = import_torch()
        flat = h.reshape(-1, h.shape[-1])
        weights, experts = torch.topk(
            torch.softmax(flat @ self.router, dim=-1), self.moe.num_experts_per_token
        )
        out = torch.zeros_like(flat)
        for e in torch.unique(experts).tolist():
            rows, slot = (experts == e).nonzero(as_tuple=True)
            y = self._expert(e, flat[rows])
            out.index_add_(0, rows, y * weights[rows, slot].unsqueeze(-1))
        if self.shared is not None:
            out = out + self.shared.forward(flat)
        return out.reshape(h.shape)
