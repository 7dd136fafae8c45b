"""Which format each linear module is stored in: :class:`QuantSpec` and its rules.

A :class:`QuantSpec` is a default :class:`~servefit.core.quant_formats.WeightFormat` plus
ordered rules (module-name pattern -> format, or ``None`` for "left unquantized"), matched
the way the engine matches ignore-lists and targets (:func:`module_matches`). Parsing
checkpoint configs into one is :mod:`servefit.core.quant`'s job.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from fnmatch import fnmatchcase

from servefit.core.quant_formats import GGUF_MXFP4_MOE, WeightFormat, gguf, gguf_mxfp4


@dataclass(frozen=True, slots=True, kw_only=True)
class QuantRule:
    """``pattern`` -> ``fmt``; ``fmt`` None means the matched module stays unquantized."""

    pattern: str
    fmt: WeightFormat | None


def module_matches(pattern: str, module_name: str) -> bool:
    """Does an ignore/target entry name this module (or a parent of it)?

    Supports the three spellings checkpoints use: ``re:<regex>`` (compressed-tensors),
    shell wildcards (ModelOpt, gpt-oss), and plain dotted names matched on component
    boundaries (``lm_head``, ``model.layers.3.mlp``; ``layers.1`` does not match ``layers.10``).
    """
    if pattern.startswith("re:"):
        return re.match(pattern[3:], module_name) is not None
    if any(ch in pattern for ch in "*?["):
        return fnmatchcase(module_name, pattern) or fnmatchcase(module_name, pattern + ".*")
    return f".{pattern}." in f".{module_name}."


@dataclass(frozen=True, slots=True, kw_only=True)
class QuantSpec:
    """How a checkpoint stores its linear weights."""

    method: str = "none"
    default: WeightFormat | None = None
    rules: tuple[QuantRule, ...] = ()
    is_targets_only: bool = False  # a module no rule names stays unquantized
    kv_cache_dtype_hint: str | None = None  # e.g. ModelOpt kv_cache_quant_algo FP8
    description: str = "unquantized"
    # the token embedding is in ``default`` too (a GGUF file quantizes token_embd; vLLM's
    # checkpoints never quantize it)
    includes_embedding: bool = False
    # Plain dotted names are looked up by dictionary (checkpoints list hundreds of layers);
    # wildcard and regex rules are scanned. The first rule that matches wins.
    _plain: dict[str, int] = field(init=False, repr=False, compare=False, hash=False)
    _patterns: tuple[tuple[int, QuantRule], ...] = field(
        init=False, repr=False, compare=False, hash=False
    )
    _plain_lengths: tuple[int, ...] = field(init=False, repr=False, compare=False, hash=False)
    # module name -> index of the rule that names it (None: no rule). Every rank, stage,
    # GPU and performance step asks about the same few hundred modules: answered once.
    _rule_index: dict[str, int | None] = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        plain: dict[str, int] = {}
        patterns = []
        for index, rule in enumerate(self.rules):
            if rule.pattern.startswith("re:") or any(ch in rule.pattern for ch in "*?["):
                patterns.append((index, rule))
            else:
                plain.setdefault(rule.pattern, index)
        object.__setattr__(self, "_plain", plain)
        object.__setattr__(self, "_patterns", tuple(patterns))
        object.__setattr__(self, "_plain_lengths", tuple(sorted({p.count(".") + 1 for p in plain})))
        object.__setattr__(self, "_rule_index", {})

    @property
    def is_quantized(self) -> bool:
        return self.method != "none"

    def rule_for(self, module_name: str) -> QuantRule | None:
        """The first rule that names this module (or a parent of it), if any."""
        try:
            best = self._rule_index[module_name]
        except KeyError:
            best = self._rule_index[module_name] = self._first_rule(module_name)
        return None if best is None else self.rules[best]

    def _first_rule(self, module_name: str) -> int | None:
        best: int | None = None
        if self._plain:
            parts = module_name.split(".")
            for length in self._plain_lengths:  # only the dotted lengths some rule has
                for start in range(len(parts) - length + 1):
                    index = self._plain.get(".".join(parts[start : start + length]))
                    if index is not None and (best is None or index < best):
                        best = index
        for index, rule in self._patterns:
            if best is not None and index > best:
                break
            if module_matches(rule.pattern, module_name):
                best = index
                break
        return best

    def format_for(self, module_name: str) -> WeightFormat | None:
        """The format of one linear module, ``None`` when it stays in the model dtype."""
        rule = self.rule_for(module_name)
        if rule is not None:
            return rule.fmt
        if self.is_targets_only:
            return None
        return self.default


NO_QUANT = QuantSpec()


def uniform_quant(
    fmt: WeightFormat,
    *,
    method: str,
    include_lm_head: bool = True,
    include_embedding: bool = False,
) -> QuantSpec:
    """Every linear layer (and the LM head; with ``include_embedding`` the token embedding
    too) in one format: how GGUF and MLX exports, or a whole-model FP8/FP4 export, are
    described when no config says more."""
    rules = (QuantRule(pattern="lm_head", fmt=fmt),) if include_lm_head else ()
    return QuantSpec(
        method=method,
        default=fmt,
        rules=rules,
        description=fmt.name,
        includes_embedding=include_embedding,
    )


EXPERTS_PATTERN = "*.experts.*"  # the routed experts' stacked tensors (weight_layers.py)


def gguf_quant(kind: str) -> QuantSpec:
    """A checkpoint as llama.cpp's converter and ``llama-quantize`` write it in GGUF type
    ``kind``: one type for every tensor (the token embedding included), or for
    ``MXFP4_MOE`` llama.cpp's mix (llama-quant.cpp ``llama_tensor_get_type``: "MoE tensors
    -> MXFP4, other tensors -> Q8_0", the output head Q8_0), which ggml-org's gpt-oss GGUFs
    are. Shared experts are 2-D tensors in a GGUF, so Q8_0 too."""
    key = kind.lower()
    if key == GGUF_MXFP4_MOE:
        q8 = gguf("q8_0")
        return QuantSpec(
            method=f"gguf {kind.upper()}",
            default=q8,
            rules=(
                QuantRule(pattern="lm_head", fmt=q8),
                QuantRule(pattern=EXPERTS_PATTERN, fmt=gguf_mxfp4()),
            ),
            description="gguf-mxfp4 experts, gguf-q8_0 elsewhere",
            includes_embedding=True,
        )
    return uniform_quant(gguf(kind), method=f"gguf {kind.upper()}", include_embedding=True)
