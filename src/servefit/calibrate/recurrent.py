"""The synthetic stack's constant-state mixers: Gated DeltaNet linear attention and Mamba.

They stand in for vLLM's Triton kernels (``fla`` ``chunk_gated_delta_rule`` and
``fused_recurrent_gated_delta_rule`` for Qwen3-Next/Qwen3.5/3.6; ``mamba_chunk_scan_combined``
and ``selective_state_update`` for Mamba-2; ``selective_scan`` for Mamba-1) the way
:class:`~servefit.calibrate.layers.Attention`'s SDPA stands in for FlashAttention: plain
PyTorch doing the work :func:`servefit.core.op_rows.state_row` counts, not the same code.

- Every step reads each sequence's recurrent state and conv window once and writes them once
  (the state lives in a static per-sequence cache, like vLLM's Mamba cache), whatever the
  context: no L^2 term, no KV cache.
- Per token the recurrence does about six FLOPs per state element (decay, k^T S, the update
  k u^T and the read-out q S), as ``LINEAR_ATTENTION_FLOPS_PER_STATE_ELEMENT`` and
  ``MAMBA_FLOPS_PER_STATE_ELEMENT`` count, plus a depthwise causal conv of the conv window.
- Prefill runs the chunked form (chunks of :data:`CHUNK_TOKENS`: matmuls against the state
  at the chunk's start, a small causal C x C block inside it), decode the recurrent form.

Approximations, all small next to the state traffic and the projections: the delta rule
corrects each token against the state at its chunk's start (``fla`` also solves the
within-chunk triangular system); Mamba-1's per-channel, per-state-element decay is one decay
per group of :data:`MAMBA1_CHANNELS_PER_HEAD` channels (the same state size and FLOPs).
"""

from __future__ import annotations

import math
from typing import Any

from servefit.calibrate.layers import rand
from servefit.calibrate.measure import Device, import_torch
from servefit.core.model_spec import LinearAttentionSpec, MambaSpec

CHUNK_TOKENS = 64
MAMBA1_CHANNELS_PER_HEAD = 64


def gated_recurrence(
    q: Any, k: Any, v: Any, log_decay: Any, state: Any, beta: Any = None
) -> tuple[Any, Any]:
    """``S_t = exp(g_t) S_{t-1} + k_t u_t^T``, ``o_t = q_t^T S_t``, with ``u = v`` (Mamba) or
    the delta rule ``u = beta (v - S^T k)`` (Gated DeltaNet). ``q, k``: [b, h, t, dk];
    ``v``: [b, h, t, dv]; ``log_decay``: [b, h, t] (<= 0); ``state``: [b, h, dk, dv].
    Returns (outputs [b, h, t, dv], the new state)."""
    torch = import_torch()
    t = q.shape[2]
    s = state
    outs = []
    for lo in range(0, t, CHUNK_TOKENS):
        hi = min(lo + CHUNK_TOKENS, t)
        qc, kc, vc = q[:, :, lo:hi], k[:, :, lo:hi], v[:, :, lo:hi]
        g = torch.cumsum(log_decay[:, :, lo:hi], dim=-1)  # [b, h, c]
        u = vc if beta is None else (vc - kc @ s) * beta[:, :, lo:hi, None]
        out = (qc * g.exp()[..., None]) @ s  # what the state before the chunk contributes
        if hi - lo > 1:
            diff = g[..., :, None] - g[..., None, :]
            causal = torch.ones(hi - lo, hi - lo, dtype=torch.bool, device=q.device).tril()
            scores = (qc @ kc.transpose(-1, -2)) * diff.masked_fill(~causal, -math.inf).exp()
            out = out + scores @ u
        else:
            out = out + (qc * kc).sum(-1, keepdim=True) * u
        last = g[..., -1:]  # [b, h, 1]
        s = s * last.exp()[..., None] + (kc * (last - g).exp()[..., None]).transpose(-1, -2) @ u
        outs.append(out)
    return torch.cat(outs, dim=2) if len(outs) > 1 else outs[0], s


def causal_conv(x: Any, conv_state: Any, weight: Any) -> Any:
    """Depthwise causal conv1d of ``x`` [b, t, c] after the cached window ``conv_state``
    [b, c, K - 1] (updated in place), then SiLU."""
    torch = import_torch()
    import torch.nn.functional as F  # noqa: N812

    full = torch.cat([conv_state, x.transpose(1, 2)], dim=-1)  # [b, c, K - 1 + t]
    y = F.conv1d(full, weight.unsqueeze(1), groups=weight.shape[0])
    conv_state.copy_(full[..., full.shape[-1] - conv_state.shape[-1] :])
    return F.silu(y).transpose(1, 2)


def _gated_norm(o: Any, z: Any) -> Any:
    """RMSNorm of the output, gated by SiLU(z) (both kinds end this way)."""
    torch = import_torch()
    import torch.nn.functional as F  # noqa: N812

    return o * torch.rsqrt(o.pow(2).mean(-1, keepdim=True) + 1e-6) * F.silu(z)


class GatedDeltaNet:
    """Qwen3-Next / Qwen3.5 linear attention: in-projection (q, k, v, z, beta, decay), conv
    over q/k/v, the gated delta rule per value head, gated RMSNorm, out-projection."""

    def __init__(
        self, a: LinearAttentionSpec, hidden: int, device: Device, dtype: Any, batch: int
    ) -> None:
        torch = import_torch()
        dev = device.torch_device
        self.a = a
        self.conv_dim = 2 * a.key_dim + a.value_dim
        width = self.conv_dim + a.value_dim + 2 * a.num_v_heads  # + z, beta, decay
        self.w_in = rand(torch, hidden, width, device=dev, dtype=dtype)
        self.conv_w = rand(torch, self.conv_dim, a.conv_kernel, device=dev, dtype=dtype)
        self.conv_state = rand(
            torch, batch, self.conv_dim, a.conv_kernel - 1, device=dev, dtype=dtype
        )
        shape = (batch, a.num_v_heads, a.k_head_dim, a.v_head_dim)
        self.state = rand(torch, *shape, device=dev, dtype=dtype)
        self.wo = rand(torch, a.value_dim, hidden, device=dev, dtype=dtype)

    def forward(self, h: Any, start: int) -> Any:
        torch = import_torch()
        import torch.nn.functional as F  # noqa: N812

        a, (b, t, _) = self.a, h.shape
        proj = h @ self.w_in
        c, vd, hv = self.conv_dim, a.value_dim, a.num_v_heads
        mixed = causal_conv(proj[..., :c], self.conv_state[:b], self.conv_w)
        z = proj[..., c : c + vd].view(b, t, hv, a.v_head_dim).transpose(1, 2)
        beta = torch.sigmoid(proj[..., c + vd : c + vd + hv]).transpose(1, 2)
        log_decay = -0.1 * F.softplus(proj[..., c + vd + hv :]).transpose(1, 2)

        def heads(x: Any, n: int, d: int) -> Any:
            x = x.reshape(b, t, n, d).transpose(1, 2)
            return x.repeat_interleave(hv // n, dim=1) if n != hv else x

        q = F.normalize(heads(mixed[..., : a.key_dim], a.num_k_heads, a.k_head_dim), dim=-1)
        k = F.normalize(
            heads(mixed[..., a.key_dim : 2 * a.key_dim], a.num_k_heads, a.k_head_dim), dim=-1
        )
        v = heads(mixed[..., 2 * a.key_dim :], hv, a.v_head_dim)
        o, s = gated_recurrence(q, k, v, log_decay, self.state[:b], beta)
        self.state[:b].copy_(s)
        return _gated_norm(o, z).transpose(1, 2).reshape(b, t, vd) @ self.wo


def _mamba1_channels_per_head(d_inner: int) -> int:
    return next(p for p in (MAMBA1_CHANNELS_PER_HEAD, 32, 16, 8, 4, 2, 1) if d_inner % p == 0)


class Mamba:
    """Mamba-2 (Nemotron-H, Falcon-H1, Granite-4.0-H): in-projection (z, x/B/C, dt), conv
    over x/B/C, the SSD recurrence per head (state ``head_dim x d_state``), gated RMSNorm,
    out-projection. Mamba-1 (Jamba): in-projection (x, z), conv over x, x_proj to dt/B/C,
    dt_proj, the selective scan (state ``d_inner x d_state``), out-projection."""

    def __init__(self, m: MambaSpec, hidden: int, device: Device, dtype: Any, batch: int) -> None:
        torch = import_torch()
        dev = device.torch_device
        self.m = m
        if m.version == 2:
            self.heads, self.head_dim, self.groups = m.num_heads, m.head_dim, m.n_groups
            width = m.d_inner + m.conv_dim + m.num_heads  # z, x/B/C, dt
        else:
            self.head_dim = _mamba1_channels_per_head(m.d_inner)
            self.heads, self.groups = m.d_inner // self.head_dim, 1
            width = 2 * m.d_inner  # x, z
            dt_rank = m.dt_rank or math.ceil(hidden / 16)
            self.x_proj = rand(
                torch, m.d_inner, dt_rank + 2 * m.state_size, device=dev, dtype=dtype
            )
            self.dt_proj = rand(torch, dt_rank, m.d_inner, device=dev, dtype=dtype)
        self.w_in = rand(torch, hidden, width, device=dev, dtype=dtype)
        self.conv_w = rand(torch, m.conv_dim, m.conv_kernel, device=dev, dtype=dtype)
        self.conv_state = rand(torch, batch, m.conv_dim, m.conv_kernel - 1, device=dev, dtype=dtype)
        shape = (batch, self.heads, m.state_size, self.head_dim)
        self.state = rand(torch, *shape, device=dev, dtype=dtype)
        self.a_log = torch.zeros(self.heads, device=dev, dtype=dtype)
        self.wo = rand(torch, m.d_inner, hidden, device=dev, dtype=dtype)

    def forward(self, h: Any, start: int) -> Any:
        import_torch()
        import torch.nn.functional as F  # noqa: N812

        m, (b, t, _) = self.m, h.shape
        n, d, nh, p = m.state_size, m.d_inner, self.heads, self.head_dim
        proj = h @ self.w_in
        if m.version == 2:
            z = proj[..., :d]
            xbc = causal_conv(proj[..., d : d + m.conv_dim], self.conv_state[:b], self.conv_w)
            x = xbc[..., :d]
            bc = xbc[..., d:].reshape(b, t, 2, self.groups, n).transpose(2, 3)  # [b,t,g,2,n]
            bc = bc.repeat_interleave(nh // self.groups, dim=2)  # [b, t, h, 2, n]
            dt = F.softplus(proj[..., d + m.conv_dim :])  # [b, t, h]
        else:
            z = proj[..., d:]
            x = causal_conv(proj[..., :d], self.conv_state[:b], self.conv_w)
            dbc = x @ self.x_proj
            rank = self.dt_proj.shape[0]
            dt = F.softplus(dbc[..., :rank] @ self.dt_proj).view(b, t, nh, p).mean(-1)
            bc = dbc[..., rank:].reshape(b, t, 1, 2, n).expand(b, t, nh, 2, n)
        bc = bc.permute(3, 0, 2, 1, 4)  # [2, b, h, t, n]
        dt = dt.transpose(1, 2)  # [b, h, t]
        xh = x.reshape(b, t, nh, p).transpose(1, 2)  # [b, h, t, p]
        log_decay = -dt * self.a_log.exp()[None, :, None]
        y, s = gated_recurrence(bc[1], bc[0], xh * dt[..., None], log_decay, self.state[:b])
        self.state[:b].copy_(s)
        y = (y + xh).transpose(1, 2).reshape(b, t, d)  # + D x
        return _gated_norm(y, z) @ self.wo
