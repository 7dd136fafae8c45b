"""What a model is, in the few numbers that decide memory and speed.

A :class:`ModelSpec` is a stack of :class:`LayerSpec`, each a *mixer* (the token-mixing
part: softmax attention, MLA, linear attention or a Mamba SSM) and an *MLP* (dense or
mixture-of-experts). Model families only describe shapes; every count and byte figure is
derived from these shapes in :mod:`servefit.core.weights` and :mod:`servefit.core.kv_cache`.

Specs are built from Hugging Face ``config.json`` dictionaries by
:func:`servefit.core.hf_config.spec_from_hf_config`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from servefit.core.image_tokens import ImageTokenRule
from servefit.core.quant import QuantSpec
from servefit.errors import ConfigError


class MixerKind(StrEnum):
    """The kind of sequence state a layer keeps (what vLLM calls a KV-cache spec type)."""

    FULL_ATTENTION = "full_attention"
    SLIDING_WINDOW = "sliding_window"
    MLA = "mla"
    LINEAR_ATTENTION = "linear_attention"
    MAMBA = "mamba"


def _require_positive(owner: str, **values: int | None) -> None:
    for name, value in values.items():
        if value is not None and value <= 0:
            raise ConfigError(f"{owner}: {name} must be positive, got {value}")


@dataclass(frozen=True, slots=True, kw_only=True)
class AttentionSpec:
    """Softmax attention with separate K and V per KV head (MHA, GQA, MQA).

    ``sliding_window_tokens`` set means the layer only attends to the last W tokens.
    """

    num_q_heads: int
    num_kv_heads: int
    head_dim: int
    v_head_dim: int | None = None
    sliding_window_tokens: int | None = None
    has_output_gate: bool = False  # Qwen3-Next / Qwen3.5 gated attention: q_proj emits a gate
    has_qkv_bias: bool = False
    has_o_bias: bool = False
    has_qk_norm: bool = False
    has_sinks: bool = False  # gpt-oss: one learned sink logit per head
    attention_chunk_tokens: int | None = None  # Llama 4 chunked local attention (iRoPE)
    # Gemma 4: the layer reads an earlier layer's KV cache (vLLM's
    # kv_sharing_target_layer_name) and keeps none of its own: no K/V projections, no k_norm
    shares_kv_cache: bool = False
    # Gemma 4 attention_k_eq_v: the values are the keys. The checkpoint has no v_proj; vLLM
    # loads k_proj into both the K and V slots of qkv_proj, and the cache keeps K and V
    is_k_eq_v: bool = False

    def __post_init__(self) -> None:
        _require_positive(
            "attention",
            num_q_heads=self.num_q_heads,
            num_kv_heads=self.num_kv_heads,
            head_dim=self.head_dim,
            sliding_window_tokens=self.sliding_window_tokens,
        )
        if self.num_q_heads % self.num_kv_heads:
            raise ConfigError(
                f"attention: num_attention_heads ({self.num_q_heads}) is not a multiple of "
                f"num_key_value_heads ({self.num_kv_heads})"
            )

    @property
    def kind(self) -> MixerKind:
        if self.sliding_window_tokens is None:
            return MixerKind.FULL_ATTENTION
        return MixerKind.SLIDING_WINDOW

    @property
    def value_head_dim(self) -> int:
        return self.v_head_dim if self.v_head_dim is not None else self.head_dim


@dataclass(frozen=True, slots=True, kw_only=True)
class MlaSpec:
    """Multi-head latent attention (DeepSeek-V2/V3, Kimi-K2): one compressed latent per token.

    DeepSeek-V3.2's sparse attention adds a *lightning indexer* to the layer
    (``index_head_dim`` > 0): ``index_num_heads`` query heads scoring one fp8 key per token,
    which vLLM caches beside the latent (its own cache layer, same block size).
    """

    num_heads: int
    q_lora_rank: int | None
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    index_num_heads: int = 0  # 0: no lightning indexer (dense MLA)
    index_head_dim: int = 0

    def __post_init__(self) -> None:
        _require_positive(
            "MLA",
            num_heads=self.num_heads,
            q_lora_rank=self.q_lora_rank,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            v_head_dim=self.v_head_dim,
        )
        if (self.index_num_heads > 0) != (self.index_head_dim > 0):
            raise ConfigError(
                "MLA: the lightning indexer needs both index_n_heads and index_head_dim, got "
                f"{self.index_num_heads} and {self.index_head_dim}"
            )

    @property
    def kind(self) -> MixerKind:
        return MixerKind.MLA

    @property
    def has_indexer(self) -> bool:
        """DeepSeek-V3.2 sparse attention (DSA): a lightning indexer with its own cache."""
        return self.index_head_dim > 0


@dataclass(frozen=True, slots=True, kw_only=True)
class LinearAttentionSpec:
    """Gated DeltaNet linear attention (Qwen3-Next, Qwen3.5/3.6): constant state per sequence."""

    num_k_heads: int
    num_v_heads: int
    k_head_dim: int
    v_head_dim: int
    conv_kernel: int

    def __post_init__(self) -> None:
        _require_positive(
            "linear attention",
            num_k_heads=self.num_k_heads,
            num_v_heads=self.num_v_heads,
            k_head_dim=self.k_head_dim,
            v_head_dim=self.v_head_dim,
            conv_kernel=self.conv_kernel,
        )

    @property
    def kind(self) -> MixerKind:
        return MixerKind.LINEAR_ATTENTION

    @property
    def key_dim(self) -> int:
        return self.num_k_heads * self.k_head_dim

    @property
    def value_dim(self) -> int:
        return self.num_v_heads * self.v_head_dim


@dataclass(frozen=True, slots=True, kw_only=True)
class MambaSpec:
    """A Mamba SSM mixer. ``version`` 1 (Jamba) or 2 (Nemotron-H, Falcon-H1, Granite-4.0-H)."""

    version: int
    d_inner: int  # expand * hidden (Mamba1) or num_heads * head_dim (Mamba2)
    state_size: int  # d_state
    conv_kernel: int
    num_heads: int = 0  # Mamba2 only
    head_dim: int = 0  # Mamba2 only
    n_groups: int = 1  # Mamba2 only
    dt_rank: int = 0  # Mamba1 only
    has_conv_bias: bool = True
    has_proj_bias: bool = False
    has_dt_norms: bool = False  # Jamba: dt/B/C layer norms
    has_norm: bool = True  # Mamba2: the gated RMSNorm's weight (Falcon-H1: mamba_rms_norm)

    def __post_init__(self) -> None:
        if self.version not in (1, 2):
            raise ConfigError(f"Mamba version must be 1 or 2, got {self.version}")
        _require_positive(
            "Mamba",
            d_inner=self.d_inner,
            state_size=self.state_size,
            conv_kernel=self.conv_kernel,
        )
        if self.version == 2 and self.num_heads * self.head_dim != self.d_inner:
            raise ConfigError(
                f"Mamba2: num_heads ({self.num_heads}) x head_dim ({self.head_dim}) "
                f"!= d_inner ({self.d_inner})"
            )

    @property
    def kind(self) -> MixerKind:
        return MixerKind.MAMBA

    @property
    def conv_dim(self) -> int:
        """Channels that go through the causal conv1d."""
        if self.version == 1:
            return self.d_inner
        return self.d_inner + 2 * self.n_groups * self.state_size


Mixer = AttentionSpec | MlaSpec | LinearAttentionSpec | MambaSpec


@dataclass(frozen=True, slots=True, kw_only=True)
class DenseMlpSpec:
    """A dense (gated) MLP: its intermediate width."""

    intermediate_size: int
    is_gated: bool = True  # gate_proj * up_proj (SwiGLU/GeGLU) vs up_proj only (relu2, gelu)
    has_bias: bool = False

    def __post_init__(self) -> None:
        _require_positive("MLP", intermediate_size=self.intermediate_size)


@dataclass(frozen=True, slots=True, kw_only=True)
class MoeSpec:
    """A mixture-of-experts MLP: routed experts, experts per token, shared experts and widths."""

    num_experts: int
    num_experts_per_token: int
    expert_intermediate_size: int
    shared_intermediate_size: int = 0  # total intermediate width of the always-on shared expert(s)
    has_shared_gate: bool = False  # Qwen2-MoE / Qwen3-Next: sigmoid gate on the shared expert
    is_gated: bool = True
    has_expert_bias: bool = False  # gpt-oss
    has_router_bias: bool = False  # gpt-oss
    has_score_correction_bias: bool = False  # DeepSeek-V3 noaux_tc
    # Gemma 4's router: a per-dimension input scale and a per-expert output scale
    has_router_scales: bool = False

    def __post_init__(self) -> None:
        _require_positive(
            "MoE",
            num_experts=self.num_experts,
            num_experts_per_token=self.num_experts_per_token,
            expert_intermediate_size=self.expert_intermediate_size,
        )
        if self.num_experts_per_token > self.num_experts:
            raise ConfigError(
                f"MoE: num_experts_per_tok ({self.num_experts_per_token}) exceeds the number "
                f"of experts ({self.num_experts})"
            )


Mlp = DenseMlpSpec | MoeSpec


@dataclass(frozen=True, slots=True, kw_only=True)
class LayerSpec:
    """One decoder layer: its token mixer (attention kind or state) and its MLP."""

    mixer: Mixer | None
    mlp: Mlp | None
    num_norms: int = 2  # RMSNorm weights of width hidden_size (Gemma 2/3 have 4)
    # Falcon-H1: a second mixer on the same input, its output summed with the first's
    # (attention and Mamba-2 in parallel in every layer); it keeps its own cache
    parallel_mixer: Mixer | None = None
    has_layer_scalar: bool = False  # Gemma 4: one learned output scale, in the checkpoint

    @property
    def mixers(self) -> tuple[Mixer, ...]:
        """The layer's mixers: none, one, or two in parallel."""
        return tuple(m for m in (self.mixer, self.parallel_mixer) if m is not None)


@dataclass(frozen=True, slots=True, kw_only=True)
class VisionSpec:
    """A vision tower, counted by its parameters (its activations are not modelled), with
    what its processor makes of an image (:mod:`servefit.core.image_tokens`) and the shape
    its attention runs over (the encoder's time per image)."""

    num_params: int
    description: str
    image_rule: ImageTokenRule | None = None
    depth: int = 0
    hidden_size: int = 0
    # the blocks attending over the whole image (None: every block); the others attend
    # within windows of window_patches positions (Qwen2.5-VL's window attention)
    full_attention_blocks: tuple[int, ...] | None = None
    window_patches: int = 0

    def encoder_flops(self, patches: int) -> float:
        """FLOPs of one image of ``patches`` positions: 2 per weight per position, and the
        attention's QK^T and AV over the positions each block attends to."""
        attention = 0.0
        for block in range(self.depth):
            full = self.full_attention_blocks is None or block in self.full_attention_blocks
            attended = patches if full or not self.window_patches else self.window_patches
            attention += 4.0 * self.hidden_size * patches * min(attended, patches)
        return 2.0 * self.num_params * patches + attention


@dataclass(frozen=True, slots=True, kw_only=True)
class FileTensor:
    """One tensor as a weights file stores it (a GGUF file's tensor table): its exact bytes
    and the decoder layer it belongs to (None: embedding, output norm and head)."""

    name: str
    layer: int | None
    num_bytes: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelSpec:
    """A model as vLLM loads it: layers by kind, widths, vocabulary, dtype and weight formats."""

    name: str
    architecture: str
    model_type: str
    hidden_size: int
    vocab_size: int
    layers: tuple[LayerSpec, ...]
    dtype: str = "bfloat16"
    tie_word_embeddings: bool = False
    max_position_embeddings: int | None = None
    mtp_layers: tuple[LayerSpec, ...] = ()
    vision: VisionSpec | None = None
    quant: QuantSpec = field(default_factory=QuantSpec)
    module_prefix: str = "model."  # "model.language_model." for nested multimodal configs
    naming: str = "default"  # module-name family, see servefit.core.weights.NAMING
    # vLLM precomputes a RoPE cos/sin table of positions x rotary dims per distinct RoPE
    # configuration (vllm/model_executor/layers/rotary_embedding): memory on every GPU.
    rope_cache_positions: int = 0
    rope_cache_dims: tuple[int, ...] = ()
    # Gemma 4's per-layer inputs (PLE): a second embedding table of
    # per_layer_input_vocab_size x (num_layers x per_layer_input_size), its projection from
    # the hidden state, and in every layer a gate and a projection back (0: none)
    per_layer_input_size: int = 0
    per_layer_input_vocab_size: int = 0
    # the weights file's own tensor table, when servefit read one (a .gguf): the engines
    # that load that file count its bytes exactly instead of estimating them
    file_tensors: tuple[FileTensor, ...] = ()
    _hash: int = field(init=False, repr=False, compare=False, hash=False)
    _kinds: frozenset[MixerKind] = field(init=False, repr=False, compare=False, hash=False)
    _sparse: bool = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        _require_positive(self.name, hidden_size=self.hidden_size, vocab_size=self.vocab_size)
        if not self.layers:
            raise ConfigError(f"{self.name}: the model has no layers")
        _require_positive(self.name, per_layer_input_size=self.per_layer_input_size or None)
        if self.per_layer_input_size and self.per_layer_input_vocab_size < 1:
            raise ConfigError(f"{self.name}: per-layer inputs need a vocabulary size")
        object.__setattr__(
            self, "_kinds", frozenset(m.kind for layer in self.layers for m in layer.mixers)
        )
        object.__setattr__(
            self,
            "_sparse",
            any(
                isinstance(m, MlaSpec) and m.has_indexer
                for layer in self.layers
                for m in layer.mixers
            ),
        )
        # Specs key the caches of derived quantities; hash the (large) value once.
        object.__setattr__(
            self,
            "_hash",
            hash(
                (
                    self.name,
                    self.model_type,
                    self.hidden_size,
                    self.vocab_size,
                    self.layers,
                    self.dtype,
                    self.tie_word_embeddings,
                    self.mtp_layers,
                    self.vision,
                    self.quant.method,
                    self.quant.rules,
                    self.quant.default,
                    self.module_prefix,
                    self.per_layer_input_size,
                    self.per_layer_input_vocab_size,
                )
            ),
        )

    def __hash__(self) -> int:
        return self._hash

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    def layers_of_kind(self, kind: MixerKind) -> int:
        return sum(1 for layer in self.layers if any(m.kind == kind for m in layer.mixers))

    @property
    def mixer_kinds(self) -> frozenset[MixerKind]:
        return self._kinds

    @property
    def is_sparse_mla(self) -> bool:
        """DeepSeek-V3.2 sparse attention: some MLA layer has a lightning indexer."""
        return self._sparse

    @property
    def is_moe(self) -> bool:
        return any(isinstance(layer.mlp, MoeSpec) for layer in self.layers)

    @property
    def is_hybrid(self) -> bool:
        """Mixes constant-state layers (linear attention, Mamba) with attention layers."""
        kinds = self.mixer_kinds
        has_state = bool(kinds & {MixerKind.LINEAR_ATTENTION, MixerKind.MAMBA})
        has_attention = bool(
            kinds & {MixerKind.FULL_ATTENTION, MixerKind.SLIDING_WINDOW, MixerKind.MLA}
        )
        return has_state and has_attention

    @property
    def family(self) -> str:
        """A short human label: dense, MoE, MLA, hybrid ... (for reports)."""
        parts = []
        kinds = self.mixer_kinds
        if self.is_hybrid:
            parts.append("hybrid")
        if MixerKind.MLA in kinds:
            parts.append("sparse MLA" if self.is_sparse_mla else "MLA")
        if MixerKind.SLIDING_WINDOW in kinds:
            parts.append("sliding-window")
        parts.append("MoE" if self.is_moe else "dense")
        if self.vision is not None:
            parts.append("multimodal")
        return " ".join(parts)
