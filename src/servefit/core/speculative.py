"""Speculative decoding as vLLM runs it: the ``--speculative-config`` it takes, what the
drafter adds to a GPU's memory, and how many tokens a step yields.

Read in the vLLM wheels of the releases named (``vllm/config/speculative.py``,
``vllm/v1/spec_decode/``, ``vllm/v1/kv_cache_interface.py``); docs/speculative.md walks
through a plan by hand.

**The flag.** ``--speculative-config`` is a JSON object of vLLM's ``SpeculativeConfig``
fields. ``method`` names the proposer; without it vLLM reads ``model`` ("ngram" -> ngram,
else a draft model, whose name or config may turn it into EAGLE/EAGLE-3/MTP). Every
model-specific MTP method (``deepseek_mtp``, ``qwen3_next_mtp``, ...) is ``mtp`` since
0.12 (a deprecation warning); servefit maps them the same way.

**Memory** (vLLM 0.32; the same in 0.18 and 0.24 where read):

- *weights*: an MTP drafter loads the checkpoint's own MTP layers (``mtp.*``; the
  embedding and LM head are the target's, ``llm_base_proposer._maybe_share_*``); an EAGLE
  head loads its decoder layer(s), its ``fc`` (2 x hidden in for EAGLE, 3 x hidden for
  EAGLE-3, whose first layer also reads 2 x hidden) and, for EAGLE-3, its own LM head of
  ``draft_vocab_size`` rows; a draft model loads itself whole (draft_model.py: "Draft models
  don't share embeddings with the target model"), of the target's vocabulary. N-gram and
  suffix proposers run on the CPU: no weights.
- *KV cache*: the drafter's attention layers are ordinary cache layers
  (``gpu_model_runner.get_kv_cache_spec`` walks every Attention module, the drafter's
  included), so they join the target's layers in the grouping: an EAGLE head adds one layer
  (a dense model's tokens fall by 1/(L+1)), an MTP layer on a hybrid adds one full-attention
  layer, and the groups may need padding layers ("Add N padding layers").
- *state*: a Mamba / linear-attention layer keeps ``num_speculative_tokens`` extra state
  blocks per request (``MambaSpec.num_speculative_blocks``, mamba/abstract.py).

**Speed.** A step verifies ``k + 1`` tokens per running request in one forward pass of the
target, after ``k`` forward passes of the drafter (none on the GPU for n-gram/suffix). With
``p_i`` the share of drafts whose position ``i`` is accepted (vLLM's per-position counter
over its drafts counter), a step yields ``1 + sum(p_i)`` tokens: for a constant per-token
acceptance ``a``, ``p_i = a^(i+1)`` and the sum is ``(1 - a^(k+1)) / (1 - a)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from servefit.core.model_spec import ModelSpec
from servefit.errors import InvalidArgumentError

FLAG = "--speculative-config"


class SpecMethod(StrEnum):
    NGRAM = "ngram"
    SUFFIX = "suffix"
    EAGLE = "eagle"
    EAGLE3 = "eagle3"
    MTP = "mtp"
    DRAFT_MODEL = "draft_model"
    MEDUSA = "medusa"
    MLP_SPECULATOR = "mlp_speculator"

    @property
    def runs_on_gpu(self) -> bool:
        """Whether the proposer is a network on the GPU (n-gram and suffix run on the CPU)."""
        return self not in (SpecMethod.NGRAM, SpecMethod.SUFFIX)

    @property
    def needs_draft_config(self) -> bool:
        """Whether the proposer is a separate checkpoint whose config servefit reads."""
        return self in (SpecMethod.EAGLE, SpecMethod.EAGLE3, SpecMethod.DRAFT_MODEL)


# The first release (V1 engine) taking each method, read in the wheels: 0.8.5's
# SpeculativeMethod is ngram, eagle, medusa, mlp_speculator, draft_model; 0.9.2 adds eagle3
# and deepseek_mtp (v1/spec_decode/medusa.py appears); 0.11.0 adds the generic "mtp" and
# qwen3_next_mtp; 0.12.0 adds suffix (v1/spec_decode/suffix_decoding.py). A draft model is
# in the Literal from 0.8.5 but V1 refused it ("Draft model speculative decoding is not
# supported yet", engine/arg_utils.py) up to 0.14.0; 0.16.0 ships v1/spec_decode/
# draft_model.py (0.15 not read: servefit takes 0.16).
FIRST_RELEASE: dict[SpecMethod, tuple[int, int]] = {
    SpecMethod.NGRAM: (0, 8),
    SpecMethod.EAGLE: (0, 8),
    SpecMethod.MEDUSA: (0, 9),
    SpecMethod.MLP_SPECULATOR: (0, 8),
    SpecMethod.EAGLE3: (0, 9),
    SpecMethod.MTP: (0, 9),
    SpecMethod.SUFFIX: (0, 12),
    SpecMethod.DRAFT_MODEL: (0, 16),
}
# model-specific MTP methods -> the first release whose SpeculativeMethod / MTPModelTypes
# names them (0.9.2, 0.11.0, 0.12.0, 0.14.0, 0.18.0, 0.24.0, 0.32.0 read); each is "mtp"
MTP_ALIASES: dict[str, tuple[int, int]] = {
    "deepseek_mtp": (0, 9),
    "mtp": (0, 11),
    "qwen3_next_mtp": (0, 11),
    "ernie_mtp": (0, 11),
    "mimo_mtp": (0, 11),
    "longcat_flash_mtp": (0, 11),
    "glm4_moe_mtp": (0, 12),
    "pangu_ultra_moe_mtp": (0, 12),
    "exaone_moe_mtp": (0, 14),
    "glm4_moe_lite_mtp": (0, 18),
    "glm_ocr_mtp": (0, 18),
    "nemotron_h_mtp": (0, 18),
    "qwen3_5_mtp": (0, 18),
    "step3p5_mtp": (0, 18),
    "mimo_v2_mtp": (0, 24),
    "exaone4_5_mtp": (0, 24),
    "minimax_m3_mtp": (0, 24),
    "hy_v3_mtp": (0, 24),
    "gemma4_mtp": (0, 24),
}
# Methods vLLM takes that servefit does not plan, each with why.
NOT_PLANNED: dict[str, str] = {
    "medusa": "Medusa heads are MLP heads servefit does not lay out yet",
    "mlp_speculator": "MLP speculators are heads servefit does not lay out yet",
    "custom_class": "a custom proposer class has no shape servefit can read",
    "ngram_gpu": "the GPU n-gram proposer's buffers are not modelled",
    "dflash": "DFlash drafts are not modelled",
    "dspark": "DSpark drafts are not modelled",
    "extract_hidden_states": "it extracts hidden states; it does not speculate",
}
# vLLM 0.32's SpeculativeConfig fields a user may set (vllm/config/speculative.py); any
# other key is refused, as vLLM's pydantic config refuses it
FIELDS = frozenset(
    {
        "enforce_eager",
        "num_speculative_tokens",
        "model",
        "method",
        "draft_tensor_parallel_size",
        "tensor_parallel_size",
        "quantization",
        "moe_backend",
        "attention_backend",
        "kv_cache_dtype",
        "max_model_len",
        "revision",
        "code_revision",
        "index_share_for_mtp_iteration",
        "disable_padded_drafter_batch",
        "disable_eagle_block_drop",
        "use_local_argmax_reduction",
        "use_heterogeneous_vocab",
        "prompt_lookup_max",
        "prompt_lookup_min",
        "parallel_drafting",
        "num_speculative_tokens_per_batch_size",
        "suffix_decoding_max_tree_depth",
        "suffix_decoding_max_cached_requests",
        "suffix_decoding_max_spec_factor",
        "suffix_decoding_min_token_prob",
        "rejection_sample_method",
        "synthetic_acceptance_rates",
        "synthetic_acceptance_length",
        "enable_adaptive_verification",
        "draft_sample_method",
        "dspark_draft_topk",
        "speculative_token_tree",
        "disable_by_batch_size",
    }
)
# ngram's prompt-lookup window when neither bound is given (vllm/config/speculative.py:
# "TODO(woosuk): Tune these values. They are arbitrarily chosen.")
NGRAM_DEFAULT_LOOKUP = 5


@dataclass(frozen=True, slots=True, kw_only=True)
class DraftNetwork:
    """A separate draft checkpoint (an EAGLE head or a draft model), as its config.json
    describes it; ``draft_vocab_size`` is EAGLE-3's own LM head's rows (None: the target's
    LM head serves the head)."""

    spec: ModelSpec
    draft_vocab_size: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Acceptance:
    """How often the drafts are accepted: ``per_position[i]`` is the share of drafts whose
    position ``i`` is accepted (vLLM's ``spec_decode_num_accepted_tokens_per_pos`` over
    ``spec_decode_num_drafts``), non-increasing, one entry per draft position."""

    per_position: tuple[float, ...]
    source: str  # where the figures come from (a flag, a measured run, a publication)

    def __post_init__(self) -> None:
        if not self.per_position:
            raise InvalidArgumentError("an acceptance needs at least one position")
        for p in self.per_position:
            if not 0.0 <= p <= 1.0:
                raise InvalidArgumentError(
                    f"acceptance {p} is not a share in [0, 1] (a per-position acceptance)"
                )

    @classmethod
    def constant(cls, rate: float, k: int, *, source: str) -> Acceptance:
        """Every draft token accepted with probability ``rate`` given the ones before it."""
        if not 0.0 <= rate < 1.0:
            raise InvalidArgumentError(
                f"--acceptance-rate {rate}: a per-token acceptance in [0, 1) is needed "
                "(0.7 means each drafted token is kept 7 times in 10, given the ones before)"
            )
        return cls(per_position=tuple(rate ** (i + 1) for i in range(k)), source=source)

    @classmethod
    def from_mean_length(cls, mean_length: float, k: int, *, source: str) -> Acceptance:
        """The constant per-token acceptance ``a`` whose ``1 + a + ... + a^k`` is a measured
        mean acceptance length (vLLM's "Mean acceptance length"), found by bisection."""
        if not 1.0 <= mean_length <= k + 1:
            raise InvalidArgumentError(
                f"a mean acceptance length of {mean_length} is outside [1, {k + 1}] for "
                f"{k} speculative tokens"
            )
        low, high = 0.0, 1.0
        for _ in range(60):
            a = (low + high) / 2
            if 1.0 + sum(a ** (i + 1) for i in range(k)) < mean_length:
                low = a
            else:
                high = a
        return cls(per_position=tuple(low ** (i + 1) for i in range(k)), source=source)

    def at(self, k: int) -> tuple[float, ...]:
        """The first ``k`` positions; beyond the measured ones, each further position keeps
        the last measured ratio between neighbours (a constant conditional acceptance)."""
        known = list(self.per_position[:k])
        if len(known) < k:
            last = known[-1]
            ratio = last / known[-2] if len(known) > 1 and known[-2] > 0 else last
            while len(known) < k:
                known.append(known[-1] * min(ratio, 1.0))
        return tuple(known)

    def expected_tokens_per_step(self, k: int) -> float:
        """Tokens one verification step yields per request: the bonus token plus the
        accepted drafts, ``1 + sum(p_i)``."""
        return 1.0 + sum(self.at(k))

    def acceptance_rate(self, k: int) -> float:
        """vLLM's ``accepted tokens / draft tokens`` over ``k`` positions."""
        return sum(self.at(k)) / k


@dataclass(frozen=True, slots=True, kw_only=True)
class SpeculativeConfig:
    """One ``--speculative-config``, read as vLLM reads it."""

    method: SpecMethod
    num_speculative_tokens: int
    model: str | None = None  # the draft model / EAGLE head (None: n-gram, suffix, MTP)
    draft_tensor_parallel_size: int | None = None
    prompt_lookup_min: int | None = None
    prompt_lookup_max: int | None = None
    given_json: str = ""  # the object as the user gave it, for the vLLM command line
    method_name: str = ""  # the method as written (a model-specific MTP name is "mtp")
    # SGLang's tree (servefit.core.engines.sglang_spec): branches per draft pass and the
    # tokens verified per request (None: a chain, k + 1); the algorithm as SGLang spells it
    eagle_topk: int = 1
    num_draft_tokens: int | None = None
    sglang_algorithm: str | None = None

    @property
    def k(self) -> int:
        return self.num_speculative_tokens

    @property
    def verify_tokens(self) -> int:
        """Tokens the target verifies per request a step: the chain's k + 1 or the tree's."""
        return self.num_draft_tokens or self.k + 1

    def describe(self) -> str:
        draft = f" {self.model}" if self.model else ""
        if self.sglang_algorithm is not None:
            return (
                f"SGLang {self.sglang_algorithm}{draft}, {self.k} draft steps of top-"
                f"{self.eagle_topk}, {self.verify_tokens} tokens verified"
            )
        return f"{self.method.value}{draft}, {self.k} speculative tokens"


def check_release(sc: SpeculativeConfig, vllm_version: str) -> None:
    """Refuse a method the release's V1 engine does not take (:data:`FIRST_RELEASE`)."""
    from servefit.core.engine import parse_version

    name = sc.method_name or sc.method.value
    first = MTP_ALIASES.get(name) or FIRST_RELEASE[sc.method]
    if parse_version(vllm_version) < first:
        raise InvalidArgumentError(
            f"{FLAG}: vLLM {vllm_version} has no speculative method {name!r} in its V1 engine "
            f"(it arrives in {first[0]}.{first[1]}): plan with --vllm-version "
            f"{first[0]}.{first[1]} or later"
        )


def parse_speculative_config(
    obj: Any, vllm_version: str | None = None, *, given_json: str = ""
) -> SpeculativeConfig:
    """``--speculative-config``'s object (the JSON read by the caller, or the dict a startup
    log prints) as vLLM reads it (``vllm_version``: refuse a method that release lacks; the
    plan checks again against the release it mirrors); a key, method or value vLLM would
    refuse is refused here, naming what to fix. ``given_json`` is the object as written, for
    the vLLM command line (:mod:`servefit.adapters.speculative_config` reads and writes it)."""
    if not isinstance(obj, dict):
        raise InvalidArgumentError(f"{FLAG} must be a JSON object of vLLM's SpeculativeConfig")
    unknown = sorted(set(obj) - FIELDS)
    if unknown:
        raise InvalidArgumentError(
            f"{FLAG}: {', '.join(map(repr, unknown))} is not a field of vLLM's "
            "SpeculativeConfig (method, model, num_speculative_tokens, "
            "draft_tensor_parallel_size, prompt_lookup_min, prompt_lookup_max, ...)"
        )
    model = obj.get("model")
    if model is not None and not isinstance(model, str):
        raise InvalidArgumentError(f"{FLAG}: 'model' must be a string (a Hub id or a path)")
    name = obj.get("method")
    if name is None:  # vLLM: model "ngram" -> ngram, anything else a draft model
        name = "ngram" if model in ("ngram", "[ngram]") else "draft_model"
    if not isinstance(name, str):
        raise InvalidArgumentError(f"{FLAG}: 'method' must be a string")
    if name == "[ngram]":
        name = "ngram"
    if name in NOT_PLANNED:
        raise InvalidArgumentError(f"{FLAG}: method {name!r} is not planned: {NOT_PLANNED[name]}")
    if name in MTP_ALIASES:
        method = SpecMethod.MTP
    else:
        try:
            method = SpecMethod(name)
        except ValueError:
            known = sorted({m.value for m in SpecMethod} | set(MTP_ALIASES))
            raise InvalidArgumentError(
                f"{FLAG}: unknown method {name!r}; vLLM takes {', '.join(known)}"
            ) from None
    k = obj.get("num_speculative_tokens")
    if k is None:
        raise InvalidArgumentError(
            f"{FLAG}: num_speculative_tokens is required (how many tokens the drafter "
            "proposes a step)"
        )
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise InvalidArgumentError(
            f"{FLAG}: num_speculative_tokens must be a positive integer, got {k!r}"
        )
    if method.needs_draft_config and not model:
        raise InvalidArgumentError(
            f"{FLAG}: method {method.value!r} needs 'model' (the draft checkpoint's Hub id or path)"
        )
    low, high = obj.get("prompt_lookup_min"), obj.get("prompt_lookup_max")
    for key, value in (("prompt_lookup_min", low), ("prompt_lookup_max", high)):
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or value < 1
        ):
            raise InvalidArgumentError(f"{FLAG}: {key} must be a positive integer, got {value!r}")
    if method is SpecMethod.NGRAM:
        if low is None and high is None:
            low = high = NGRAM_DEFAULT_LOOKUP
        low = high if low is None else low
        high = low if high is None else high
        if low is not None and high is not None and low > high:
            raise InvalidArgumentError(
                f"{FLAG}: prompt_lookup_min={low} must be <= prompt_lookup_max={high}"
            )
    dtp = obj.get("draft_tensor_parallel_size")
    if dtp is not None and (isinstance(dtp, bool) or not isinstance(dtp, int) or dtp < 1):
        raise InvalidArgumentError(
            f"{FLAG}: draft_tensor_parallel_size must be a positive integer, got {dtp!r}"
        )
    sc = SpeculativeConfig(
        method=method,
        method_name=name,
        num_speculative_tokens=k,
        model=None if method in (SpecMethod.NGRAM, SpecMethod.SUFFIX) else model,
        draft_tensor_parallel_size=dtp,
        prompt_lookup_min=low if method is SpecMethod.NGRAM else None,
        prompt_lookup_max=high if method is SpecMethod.NGRAM else None,
        given_json=given_json,
    )
    if vllm_version is not None:
        check_release(sc, vllm_version)
    return sc


def check_draft_tensor_parallel(sc: SpeculativeConfig, tp: int) -> int:
    """The drafter's TP degree: vLLM takes 1 or the target's (``_verify_and_get_draft_tp``);
    servefit plans the target's (a TP-1 drafter beside a sharded target is not modelled)."""
    dtp = sc.draft_tensor_parallel_size
    if dtp is None or dtp == tp:
        return tp
    if dtp != 1:
        raise InvalidArgumentError(
            f"{FLAG}: draft_tensor_parallel_size {dtp} is neither 1 nor the target's "
            f"--tensor-parallel-size {tp}; vLLM refuses it"
        )
    raise InvalidArgumentError(
        f"{FLAG}: draft_tensor_parallel_size 1 beside --tensor-parallel-size {tp} is not "
        "planned by servefit (the drafter replicated on every GPU); leave it out to shard the "
        "drafter as the target is"
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class Speculation:
    """What the speed model needs of a speculative deployment: the config, how often its
    drafts are accepted, and the network one draft step runs (None: n-gram / suffix, on the
    CPU)."""

    config: SpeculativeConfig
    acceptance: Acceptance
    draft: ModelSpec | None

    @property
    def k(self) -> int:
        return self.config.k

    @property
    def expected_tokens_per_step(self) -> float:
        return self.acceptance.expected_tokens_per_step(self.config.k)

    def describe(self) -> str:
        a = self.acceptance
        return (
            f"speculative decoding ({self.config.describe()}): a step verifies "
            f"{self.config.verify_tokens} tokens per request and keeps "
            f"{self.expected_tokens_per_step:.2f} on "
            f"average (acceptance {a.acceptance_rate(self.k):.0%} over the draft tokens, "
            f"{a.source})"
            + (
                f"; the drafter's {self.k} steps run {self.draft.name}"
                if self.draft is not None
                else "; the drafts are looked up on the CPU (no GPU time counted)"
            )
        )
