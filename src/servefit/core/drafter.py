"""The drafter of a speculative deployment as vLLM loads it: its weights on one GPU, the
cache layers it adds beside the target's, and the network whose steps it times.

The rules and their sources are in :mod:`servefit.core.speculative`'s docstring."""

from __future__ import annotations

from dataclasses import replace

from servefit.core.model_spec import AttentionSpec, LayerSpec, ModelSpec
from servefit.core.speculative import (
    FLAG,
    DraftNetwork,
    SpecMethod,
    SpeculativeConfig,
)
from servefit.core.weights import weight_bytes
from servefit.errors import InvalidArgumentError
from servefit.units import GIB_BYTES, dtype_bytes


def _mtp_layers(spec: ModelSpec) -> tuple[LayerSpec, ...]:
    if not spec.mtp_layers:
        raise InvalidArgumentError(
            f"{FLAG}: method 'mtp' needs MTP layers in the checkpoint, and {spec.name}'s config "
            "has none (num_nextn_predict_layers / mtp_num_hidden_layers is 0 or absent): use an "
            "EAGLE head, a draft model or ngram"
        )
    return spec.mtp_layers


def _draft(sc: SpeculativeConfig, draft: DraftNetwork | None) -> DraftNetwork:
    if draft is None:  # resolve loads it; a core caller that forgot is told what is missing
        raise InvalidArgumentError(
            f"{FLAG}: the draft checkpoint {sc.model!r} was not loaded: its config.json is "
            "needed to plan its weights and KV layers"
        )
    return draft


def cache_layers(
    spec: ModelSpec, sc: SpeculativeConfig, draft: DraftNetwork | None
) -> tuple[LayerSpec, ...]:
    """The layers the drafter adds to the KV cache (after the target's, on the last stage)."""
    if not sc.method.runs_on_gpu:
        return ()
    if sc.method is SpecMethod.MTP:
        return _mtp_layers(spec)
    network = _draft(sc, draft)
    return tuple(layer for layer in network.spec.layers if layer.mixers)


def with_drafter_layers(spec: ModelSpec, layers: tuple[LayerSpec, ...]) -> ModelSpec:
    """The target with the drafter's cache layers appended: the layout vLLM groups."""
    if not layers:
        return spec
    return replace(spec, layers=spec.layers + layers, mtp_layers=())


def _attention_widths(layer: LayerSpec) -> int:
    """Output features of a layer's q, k and v projections (what EAGLE-3's wider input adds)."""
    m = layer.mixer
    if not isinstance(m, AttentionSpec):  # no MLA or state-layer EAGLE heads are planned
        return 0
    v_dim = m.v_head_dim or m.head_dim
    return m.num_q_heads * m.head_dim + m.num_kv_heads * (m.head_dim + v_dim)


def weight_bytes_per_gpu(
    spec: ModelSpec,
    sc: SpeculativeConfig,
    draft: DraftNetwork | None,
    *,
    tp: int,
    capability: tuple[int, int] | None,
    has_triton_kernels: bool,
) -> float:
    """Bytes the drafter's weights add on one GPU (TP rank of the last stage)."""
    if not sc.method.runs_on_gpu:
        return 0.0
    if sc.method is SpecMethod.MTP:
        _mtp_layers(spec)
        kwargs = {"tp": tp, "capability": capability, "has_triton_kernels": has_triton_kernels}
        with_mtp = weight_bytes(spec, include_mtp=True, **kwargs).per_stage_bytes[-1]
        return with_mtp - weight_bytes(spec, **kwargs).per_stage_bytes[-1]
    network = _draft(sc, draft)
    d = network.spec
    loaded = weight_bytes(d, tp=tp, capability=capability, has_triton_kernels=has_triton_kernels)
    if sc.method is SpecMethod.DRAFT_MODEL:
        # vLLM 0.32 v1/spec_decode/draft_model.py: "Draft models don't share embeddings
        # with the target model" (nor the LM head); the vocabularies must be equal
        if d.vocab_size != spec.vocab_size:
            raise InvalidArgumentError(
                f"{FLAG}: the draft model's vocabulary ({d.vocab_size:,}) is not the target's "
                f"({spec.vocab_size:,}); vLLM refuses it (verify_equal_vocab_size_if_draft_model)"
            )
        return loaded.per_gpu_bytes
    roles = loaded.per_gpu_by_role_bytes
    share = loaded.per_gpu_bytes
    if d.hidden_size == spec.hidden_size:  # the target's embedding serves the head
        share -= roles.get("embedding", 0.0)
    # an EAGLE head: its LM head is the target's unless EAGLE-3 ships a smaller one
    share -= roles.get("lm_head", 0.0)
    h = d.hidden_size
    element = dtype_bytes(d.dtype)
    extra_params = 0
    if sc.method is SpecMethod.EAGLE3:
        extra_params += 3 * h * h  # fc: three target hidden states -> one
        if d.layers:  # the first layer's q/k/v read [embedding, hidden]: 2 x hidden wide
            extra_params += h * _attention_widths(d.layers[0])
        if network.draft_vocab_size:
            extra_params += network.draft_vocab_size * h
    else:
        extra_params += 2 * h * h  # fc: [embedding, hidden] -> hidden
    # the fc and the head are replicated or vocabulary-sharded; q/k/v are column-sharded
    return share + extra_params * element / tp


def timing_spec(
    spec: ModelSpec, sc: SpeculativeConfig, draft: DraftNetwork | None
) -> ModelSpec | None:
    """The network one draft step runs (None: the proposer is not on the GPU)."""
    if not sc.method.runs_on_gpu:
        return None
    if sc.method is SpecMethod.MTP:
        return replace(
            spec, name=f"{spec.name} MTP", layers=_mtp_layers(spec), mtp_layers=(), vision=None
        )
    network = _draft(sc, draft)
    if network.draft_vocab_size:
        return replace(network.spec, vocab_size=network.draft_vocab_size)
    return network.spec


def notes(sc: SpeculativeConfig, bytes_per_gpu: float, added_layers: int) -> tuple[str, ...]:
    """The plan's assumptions about the drafter."""
    if not sc.method.runs_on_gpu:
        return (
            f"speculative decoding: {sc.describe()}; the {sc.method.value} proposer looks its "
            "drafts up on the CPU: no weights, no KV-cache layers",
        )
    out = [
        f"speculative decoding: {sc.describe()}; the drafter adds {bytes_per_gpu / GIB_BYTES:.2f} "
        f"GiB of weights per GPU and {added_layers} KV-cache layer"
        + ("s" if added_layers != 1 else "")
        + "; a Mamba/linear-attention layer keeps k more state blocks and conv steps a request"
    ]
    if sc.method in (SpecMethod.EAGLE, SpecMethod.EAGLE3):
        out.append(
            "the drafter shares the target's embedding when the widths match (and an EAGLE "
            "head its LM head unless it ships its own): vLLM decides by comparing weights, "
            "which servefit does not read"
        )
    return tuple(out)
