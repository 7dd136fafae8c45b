"""A synthetic serving step for a real architecture: the model's own layer shapes with random
weights, built directly on the device, over static caches (KV, MLA latent, recurrent state).

The model's layers fall into groups of identical layers (a hybrid has its linear-attention or
Mamba layers and its attention layers; DeepSeek its dense and its MoE layers). At least one
layer of every group is built, more while the budget of built layers allows, each timed on its
own; a step of the whole model is extrapolated as the sum over groups of (time of the group's
built layers / layers built) x the group's layers, plus the LM head (timed on its own), and
reports say so. Every mixer servefit models is built: softmax attention (MHA/GQA/MQA, sliding
windows and chunked attention reading only their window), MLA, Gated DeltaNet linear
attention and Mamba-1/2 (:mod:`.layers`, :mod:`.recurrent`), alone or two in parallel
(Falcon-H1), with dense or MoE MLPs, or neither (Nemotron-H's mixer-only and MLP-only
layers).

The weights are random (``randn x 0.02``), never zeros; the caches hold random values (a
decode step at context C attends C cached tokens, whatever they are).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from servefit.calibrate.layers import Attention, Mla, Mlp, Moe, rand
from servefit.calibrate.measure import Budget, Device, import_torch, time_s
from servefit.calibrate.recurrent import GatedDeltaNet, Mamba
from servefit.core.model_spec import (
    AttentionSpec,
    DenseMlpSpec,
    LayerSpec,
    LinearAttentionSpec,
    MambaSpec,
    Mixer,
    MlaSpec,
    ModelSpec,
    MoeSpec,
)
from servefit.errors import InvalidArgumentError


def check_supported(spec: ModelSpec) -> None:
    """Every layer kind servefit models has a synthetic stand-in; refuse, naming the layer and
    what it lacks, only what the stack cannot build."""
    for i, layer in enumerate(spec.layers):
        if layer.mixer is None and layer.mlp is None:
            raise InvalidArgumentError(
                f"{spec.name}: layer {i} has neither a token mixer nor an MLP: nothing to "
                "build; run `servefit calibrate --microbenchmarks-only` to measure the device"
            )
        known = (AttentionSpec, MlaSpec, LinearAttentionSpec, MambaSpec)
        parts = (*layer.mixers, *((layer.mlp,) if layer.mlp is not None else ()))
        for part in parts:
            if not isinstance(part, (*known, DenseMlpSpec, MoeSpec)):
                raise InvalidArgumentError(
                    f"{spec.name}: layer {i}'s {type(part).__name__} has no synthetic "
                    "stand-in; run `servefit calibrate --microbenchmarks-only` to measure the "
                    "device without a model"
                )


def layer_groups(spec: ModelSpec) -> list[tuple[LayerSpec, int]]:
    """The model's distinct layers, in order of first appearance, with how many it has."""
    counts = Counter(spec.layers)
    return [(layer, counts[layer]) for layer in dict.fromkeys(spec.layers)]


def built_per_group(spec: ModelSpec, num_layers: int) -> list[int]:
    """Layers to build per group: one each, then the rest of ``num_layers`` spread in
    proportion to the groups' sizes (never more than a group has)."""
    groups = layer_groups(spec)
    built = [1] * len(groups)
    spare = max(0, min(num_layers, spec.num_layers) - len(groups))
    while spare > 0:
        # the group with the most layers per built layer gets the next one
        i = max(
            (j for j, (_, n) in enumerate(groups) if built[j] < n),
            key=lambda j: groups[j][1] / built[j],
        )
        built[i] += 1
        spare -= 1
    return built


def _norm(torch: Any, x: Any) -> Any:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)


def _mixer(
    mixer: Mixer, hidden: int, device: Device, dtype: Any, batch: int, ctx: int
) -> Attention | Mla | GatedDeltaNet | Mamba:
    if isinstance(mixer, AttentionSpec):
        return Attention(mixer, hidden, device, dtype, batch, ctx)
    if isinstance(mixer, MlaSpec):
        return Mla(mixer, hidden, device, dtype, batch, ctx)
    if isinstance(mixer, LinearAttentionSpec):
        return GatedDeltaNet(mixer, hidden, device, dtype, batch)
    return Mamba(mixer, hidden, device, dtype, batch)


class _Layer:
    """One decoder layer: RMSNorm, mixer, residual, RMSNorm, MLP, residual."""

    def __init__(
        self, layer: LayerSpec, hidden: int, device: Device, dtype: Any, batch: int, ctx: int
    ) -> None:
        mlp = layer.mlp
        # Falcon-H1: two mixers on the same normed input, their outputs summed
        self.mixers = [_mixer(m, hidden, device, dtype, batch, ctx) for m in layer.mixers]
        self.mlp: Mlp | Moe | None = None
        if isinstance(mlp, DenseMlpSpec):
            self.mlp = Mlp(mlp, hidden, device, dtype)
        elif isinstance(mlp, MoeSpec):
            self.mlp = Moe(mlp, hidden, device, dtype)

    def forward(self, x: Any, start: int) -> Any:
        """``x``: [batch, tokens, hidden]; tokens enter the caches at position ``start``."""
        torch = import_torch()
        if self.mixers:
            h = _norm(torch, x)
            for mixer in self.mixers:
                x = x + mixer.forward(h, start)
        if self.mlp is not None:
            x = x + self.mlp.forward(_norm(torch, x))
        return x


@dataclass(frozen=True, slots=True)
class GroupTiming:
    """One group of identical layers: its built layers' time, and how many it stands for."""

    kind: str  # e.g. "linear_attention + MoE"
    stack_s: float
    layers_built: int
    layers_total: int


def group_kind(layer: LayerSpec) -> str:
    mixer = " | ".join(m.kind.value for m in layer.mixers) or "no mixer"
    mlp = "MoE" if isinstance(layer.mlp, MoeSpec) else ("MLP" if layer.mlp else "no MLP")
    return f"{mixer} + {mlp}"


@dataclass(frozen=True, slots=True)
class StepTiming:
    label: str
    kind: str  # prefill or decode
    batch: int
    tokens: int  # new tokens per sequence
    context: int  # cached tokens before the step
    groups: tuple[GroupTiming, ...]
    lm_head_s: float

    @property
    def stack_s(self) -> float:
        """The built layers."""
        return sum(g.stack_s for g in self.groups)

    @property
    def layers_built(self) -> int:
        return sum(g.layers_built for g in self.groups)

    @property
    def layers_total(self) -> int:
        return sum(g.layers_total for g in self.groups)

    @property
    def model_step_s(self) -> float:
        """The whole model, extrapolated per layer within each group."""
        return (
            sum(g.stack_s / g.layers_built * g.layers_total for g in self.groups) + self.lm_head_s
        )


class SyntheticModel:
    """``num_layers`` layers (at least one of each distinct layer of the model)."""

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
        h = spec.hidden_size
        self.groups = [
            (
                group_kind(layer),
                total,
                [_Layer(layer, h, device, self.dtype, max_batch, max_ctx) for _ in range(n)],
            )
            for (layer, total), n in zip(
                layer_groups(spec), built_per_group(spec, num_layers), strict=True
            )
        ]
        self.lm_head = rand(torch, h, spec.vocab_size, device=device.torch_device, dtype=self.dtype)
        self.max_batch, self.max_ctx = max_batch, max_ctx

    @property
    def layers_built(self) -> int:
        return sum(len(layers) for _, _, layers in self.groups)

    def time_step(
        self, *, batch: int, tokens: int, context: int, budget: Budget, label: str = ""
    ) -> StepTiming:
        torch = import_torch()
        if batch > self.max_batch or context + tokens > self.max_ctx:
            raise InvalidArgumentError(
                f"step {label}: batch {batch} x {context + tokens} tokens exceeds the cache "
                f"({self.max_batch} x {self.max_ctx})"
            )
        dev, h, r = self.device.torch_device, self.spec.hidden_size, budget.rotate
        xs = [torch.randn(batch, tokens, h, device=dev, dtype=self.dtype) for _ in range(r)]
        sampled = [torch.randn(batch, h, device=dev, dtype=self.dtype) for _ in range(r)]

        def timed(fn: Any) -> float:
            return time_s(
                fn, self.device, warmup=budget.warmup, repeats=budget.repeats, clock=budget.clock
            )

        def stack_of(layers: list[_Layer]) -> Any:
            def run(i: int) -> Any:
                x = xs[i % r]
                with torch.inference_mode():
                    for layer in layers:
                        x = layer.forward(x, context)
                return x

            return run

        def head(i: int) -> Any:
            with torch.inference_mode():
                return sampled[i % r] @ self.lm_head

        groups = tuple(
            GroupTiming(kind, timed(stack_of(layers)), len(layers), total)
            for kind, total, layers in self.groups
        )
        return StepTiming(
            label=label or f"{'prefill' if tokens > 1 else 'decode'} b{batch} t{tokens} c{context}",
            kind="prefill" if tokens > 1 else "decode",
            batch=batch,
            tokens=tokens,
            context=context,
            groups=groups,
            lm_head_s=timed(head),
        )
