"""Hypothesis properties of speculative decoding: what must hold whatever the model, GPU,
batch, k and acceptance (docs/speculative.md)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servefit.adapters.catalog import efficiency_table, gpu_catalog
from servefit.adapters.model_source import load_model
from servefit.adapters.speculative_config import read_speculative_config
from servefit.core import drafter
from servefit.core.ops import StepShape, model_coeffs
from servefit.core.speculative import FIELDS, Acceptance, Speculation
from servefit.core.speculative_timing import speculative_timer
from servefit.core.step_timer import make_timer
from servefit.errors import InvalidArgumentError

# models with MTP layers, so the drafter runs on the GPU (and a dense one for n-gram)
MODELS = ["Qwen/Qwen3.6-27B-FP8", "deepseek-ai/DeepSeek-V3", "meta-llama/Llama-3.1-8B"]
LOADED = {m: load_model(m, allow_hub=False) for m in MODELS}
GPUS = ["H100-SXM", "A100-80GB-SXM", "RTX-4090", "B200"]


def _timer(model: str, gpu: str, method: str, k: int, rate: float):
    spec, device = LOADED[model].spec, gpu_catalog().get(gpu)
    if method == "mtp" and not spec.mtp_layers:
        method = "ngram"
    sc = read_speculative_config(json.dumps({"method": method, "num_speculative_tokens": k}))
    profile = efficiency_table().for_gpu(device, "vllm")
    tp = 8 if "DeepSeek" in model else 1
    m = model_coeffs(spec, tp=tp)
    speculation = Speculation(
        config=sc,
        acceptance=Acceptance.constant(rate, k, source="property"),
        draft=drafter.timing_spec(spec, sc, None),
    )
    return make_timer(m, device, profile), speculative_timer(m, device, profile, speculation)


@settings(max_examples=40, deadline=None)
@given(
    model=st.sampled_from(MODELS),
    gpu=st.sampled_from(GPUS),
    method=st.sampled_from(["mtp", "ngram"]),
    k=st.integers(1, 6),
    low=st.floats(0.0, 0.9),
    more=st.floats(0.01, 0.09),
    batch=st.integers(1, 128),
    context=st.integers(1, 30_000),
)
def test_more_acceptance_is_never_slower_and_none_is_never_faster(
    model, gpu, method, k, low, more, batch, context
):
    shape = StepShape(decode_contexts=(context,) * batch)
    base, slow = _timer(model, gpu, method, k, low)
    _, fast = _timer(model, gpu, method, k, low + more)
    assert fast(shape).time_s <= slow(shape).time_s
    _, none = _timer(model, gpu, method, k, 0.0)
    assert none(shape).time_s >= base(shape).time_s  # verifying and drafting cost, nothing kept


@settings(max_examples=60, deadline=None)
@given(rate=st.floats(0.0, 0.99), k=st.integers(1, 10))
def test_tokens_a_step_lie_between_one_and_k_plus_one(rate, k):
    acceptance = Acceptance.constant(rate, k, source="property")
    assert 1.0 <= acceptance.expected_tokens_per_step(k) <= k + 1
    assert 0.0 <= acceptance.acceptance_rate(k) <= 1.0


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner),
    max_leaves=8,
)


@settings(max_examples=200, deadline=None)
@given(
    obj=st.dictionaries(
        st.sampled_from([*sorted(FIELDS), "k", "draft", "speculative_model"]), json_values
    )
)
def test_any_object_is_read_or_refused_with_a_clear_error(obj):
    """vLLM's object, whatever a user or a log puts in it: read, or refused naming the flag
    (never another exception)."""
    try:
        sc = read_speculative_config(obj, "0.33")
    except InvalidArgumentError as error:
        assert "--speculative-config" in str(error)
    else:
        assert sc.num_speculative_tokens >= 1


@pytest.mark.parametrize("text", ["", "{", "[]", "null", '"ngram"', "1e999", '{"a": NaN}'])
def test_text_that_is_no_object_is_refused(text):
    with pytest.raises(InvalidArgumentError, match="--speculative-config"):
        read_speculative_config(text, "0.33")
