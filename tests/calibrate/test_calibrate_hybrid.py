"""calibrate on every architecture servefit plans (CPU, tiny shapes): hybrids with Gated
DeltaNet or Mamba layers, MLA, sliding windows; the stand-ins' state bytes and FLOPs against
the cost rows; and what the stack still refuses."""

from __future__ import annotations

import math
import time
from dataclasses import replace

import pytest

torch = pytest.importorskip("torch", reason="the calibrate extra (PyTorch) is not installed")

from tests.calibrate.tiny_configs import (  # noqa: E402
    TINY_DEEPSEEK,
    TINY_FALCON_H1,
    TINY_GPT_OSS,
    TINY_JAMBA,
    TINY_NEMOTRON_H,
    TINY_QWEN3_NEXT,
)

from servefit.calibrate.layers import Attention, Mla  # noqa: E402
from servefit.calibrate.measure import Budget, pick_device  # noqa: E402
from servefit.calibrate.recurrent import GatedDeltaNet, Mamba, gated_recurrence  # noqa: E402
from servefit.calibrate.run import run_calibration  # noqa: E402
from servefit.calibrate.synthetic import (  # noqa: E402
    GroupTiming,
    StepTiming,
    SyntheticModel,
    built_per_group,
)
from servefit.core.hf_config import spec_from_hf_config  # noqa: E402
from servefit.core.model_spec import (  # noqa: E402
    AttentionSpec,
    LayerSpec,
    LinearAttentionSpec,
    MambaSpec,
)
from servefit.core.ops import (  # noqa: E402
    LINEAR_ATTENTION_FLOPS_PER_STATE_ELEMENT,
    model_coeffs,
)
from servefit.errors import InvalidArgumentError  # noqa: E402


@pytest.fixture(scope="module")
def cpu_clock():
    """One intra-op thread, timed by its own CPU clock (see test_calibrate_cpu)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield time.thread_time
    torch.set_num_threads(threads)


def _check_document(doc, groups: int, layers_total: int) -> None:
    """The steps timed, each from at least one layer of every group, and sane factors."""
    assert doc.scope == "model"
    assert [p.kind for p in doc.points] == ["decode", "decode", "prefill", "prefill"]
    for p in doc.points:
        assert p.layers_total == layers_total
        assert groups <= p.layers_built <= layers_total
        assert math.isfinite(p.measured_s) and p.measured_s > 0
        assert math.isfinite(p.predicted_after_s) and p.predicted_after_s > 0
    f = doc.profile
    for factor in (f.gemm_efficiency, f.attention_efficiency, f.memory_efficiency):
        assert math.isfinite(factor) and 0.02 <= factor <= 1.0
    assert math.isfinite(f.step_overhead_s) and f.step_overhead_s >= 0
    assert math.isfinite(doc.median_error_after)


@pytest.mark.parametrize(
    ("config", "groups"),
    [(TINY_QWEN3_NEXT, 2), (TINY_NEMOTRON_H, 3)],
    ids=["gated-deltanet-hybrid", "mamba2-hybrid"],
)
def test_hybrids_calibrate(config, groups, cpu_clock):
    spec = spec_from_hf_config(config, name="tiny-hybrid")
    doc = run_calibration(spec, device_name="cpu", plan_name="tiny", clock=cpu_clock)
    _check_document(doc, groups, spec.num_layers)
    # the stack builds one layer of every group even where --layers asks for fewer
    assert all(p.layers_built == groups for p in doc.points)


@pytest.mark.parametrize(
    ("config", "kinds"),
    [
        (TINY_JAMBA, {"mamba + MLP", "mamba + MoE", "full_attention + MLP"}),
        (TINY_DEEPSEEK, {"mla + MLP", "mla + MoE"}),
        (TINY_GPT_OSS, {"sliding_window + MoE", "full_attention + MoE"}),
        (TINY_NEMOTRON_H, {"mamba + no MLP", "no mixer + MoE", "full_attention + no MLP"}),
        (TINY_FALCON_H1, {"full_attention | mamba + MLP"}),
    ],
    ids=["mamba1", "mla", "sliding-window", "mixer-or-mlp-only", "parallel-mixers"],
)
def test_every_layer_kind_builds_and_steps(config, kinds, cpu_clock):
    spec = spec_from_hf_config(config, name="tiny")
    budget = replace(Budget.named("tiny"), warmup=1, repeats=1, clock=cpu_clock)
    model = SyntheticModel(spec, pick_device("cpu"), num_layers=1, max_batch=2, max_ctx=80)
    decode = model.time_step(batch=2, tokens=1, context=64, budget=budget)
    prefill = model.time_step(batch=1, tokens=80, context=0, budget=budget)  # > 1 chunk
    for step in (decode, prefill):
        assert {g.kind for g in step.groups} == kinds
        assert step.layers_total == spec.num_layers
        assert all(g.layers_built == 1 for g in step.groups)
        assert math.isfinite(step.model_step_s) and step.model_step_s > 0


def test_the_step_extrapolates_each_group_by_its_own_layers():
    step = StepTiming(
        label="decode",
        kind="decode",
        batch=1,
        tokens=1,
        context=8,
        groups=(GroupTiming("linear_attention + MLP", 3.0, 3, 48), GroupTiming("a", 2.0, 1, 16)),
        lm_head_s=0.5,
    )
    assert step.model_step_s == pytest.approx(3.0 / 3 * 48 + 2.0 * 16 + 0.5)
    assert (step.layers_built, step.layers_total) == (4, 64)


def test_built_layers_cover_every_group_then_follow_the_group_sizes(catalog_model):
    spec = catalog_model("Qwen/Qwen3.6-27B-FP8").spec  # 48 linear-attention, 16 attention
    assert built_per_group(spec, 1) == [1, 1]
    assert built_per_group(spec, 4) == [3, 1]
    assert built_per_group(spec, 8) == [6, 2]
    nemotron = catalog_model("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16").spec
    assert built_per_group(nemotron, 2) == [1, 1, 1]
    assert sum(built_per_group(nemotron, 1000)) == nemotron.num_layers


def _state_bytes_per_seq(block) -> int:
    return sum(t[0].numel() * t.element_size() for t in (block.state, block.conv_state))


@pytest.mark.parametrize(
    "config",
    [TINY_QWEN3_NEXT, TINY_NEMOTRON_H, TINY_JAMBA, TINY_FALCON_H1],
    ids=["gdn", "mamba2", "mamba1", "falcon-h1"],
)
def test_stand_in_state_is_the_state_the_cost_row_reads_and_writes(config):
    """Per sequence, the stand-in's recurrent state + conv window is what state_row moves."""
    spec = spec_from_hf_config(config, name="tiny")
    layers = model_coeffs(spec).stages[0].layers
    row = next(c.state for c, _ in layers if c.state is not None)
    mixer = next(
        m
        for layer in spec.layers
        for m in layer.mixers
        if isinstance(m, LinearAttentionSpec | MambaSpec)
    )
    device = pick_device("cpu")
    cls = GatedDeltaNet if isinstance(mixer, LinearAttentionSpec) else Mamba
    block = cls(mixer, spec.hidden_size, device, torch.float32, 3)
    assert _state_bytes_per_seq(block) == row.state_bytes_per_seq


def _matmul_flops(fn, monkeypatch) -> int:
    """FLOPs of the ``@`` products ``fn`` computes: 2 x output elements x inner width."""
    flops = 0
    matmul = torch.Tensor.__matmul__

    def counting(a, b):
        nonlocal flops
        out = matmul(a, b)
        flops += 2 * out.numel() * a.shape[-1]
        return out

    with monkeypatch.context() as m:
        m.setattr(torch.Tensor, "__matmul__", counting)
        fn()
    return flops


def test_recurrence_flops_per_token_are_the_rows(monkeypatch):
    """Decode: the delta rule's three products per state element are the row's six FLOPs;
    a prefill chunk adds its small causal block (under a third more at 128-wide heads)."""
    b, h, d = 1, 2, 128
    elements = h * d * d
    state = torch.randn(b, h, d, d)

    def run(t: int, beta: bool) -> int:
        q, k, v = (torch.randn(b, h, t, d) for _ in range(3))
        g = -torch.rand(b, h, t)
        return _matmul_flops(
            lambda: gated_recurrence(q, k, v, g, state, torch.rand(b, h, t) if beta else None),
            monkeypatch,
        )

    assert run(1, beta=True) == LINEAR_ATTENTION_FLOPS_PER_STATE_ELEMENT * elements
    assert run(1, beta=False) == 4 * elements  # Mamba: no delta correction
    per_token = run(64, beta=True) / 64
    assert 1.0 <= per_token / (LINEAR_ATTENTION_FLOPS_PER_STATE_ELEMENT * elements) <= 1.34


def test_chunked_prefill_is_the_token_by_token_recurrence():
    """Without the delta rule the chunked form is exact: 70 tokens (two chunks) at once give
    the outputs and final state of 70 single-token steps."""
    torch.manual_seed(0)
    b, h, t, dk, dv = 2, 3, 70, 8, 4
    q, k = torch.randn(b, h, t, dk), torch.randn(b, h, t, dk)
    v, g = torch.randn(b, h, t, dv), -0.1 * torch.rand(b, h, t)
    s0 = torch.randn(b, h, dk, dv)
    out, s = gated_recurrence(q, k, v, g, s0)
    step_s, outs = s0, []
    for i in range(t):
        o, step_s = gated_recurrence(
            q[:, :, i : i + 1], k[:, :, i : i + 1], v[:, :, i : i + 1], g[:, :, i : i + 1], step_s
        )
        outs.append(o)
    assert torch.allclose(out, torch.cat(outs, dim=2), atol=1e-4)
    assert torch.allclose(s, step_s, atol=1e-4)


def test_windowed_prefill_attends_only_the_window():
    torch.manual_seed(0)
    spec = AttentionSpec(num_q_heads=4, num_kv_heads=2, head_dim=8, sliding_window_tokens=16)
    attn = Attention(spec, 32, pick_device("cpu"), torch.float32, 1, 50)
    x = torch.randn(1, 50, 32)
    out = attn.forward(x, 0)
    qkv = x @ attn.wqkv
    q = qkv[..., :32].view(1, 50, 4, 8).transpose(1, 2)
    pos = torch.arange(50)
    band = (pos[None, :] <= pos[:, None]) & (pos[None, :] > pos[:, None] - 16)
    ref = torch.nn.functional.scaled_dot_product_attention(
        q, attn.k_cache[:, :, :50], attn.v_cache[:, :, :50], attn_mask=band, enable_gqa=True
    )
    assert torch.allclose(out, ref.transpose(1, 2).reshape(1, 50, 32) @ attn.wo, atol=1e-5)


def test_mla_absorbed_decode_equals_the_expanded_prefill():
    """The last token decoded against the latent cache (absorbed) is the last row of the
    prefill that up-projected the cache (expanded)."""
    torch.manual_seed(0)
    spec = spec_from_hf_config(TINY_DEEPSEEK, name="tiny-mla")
    mla = Mla(spec.layers[0].mixer, spec.hidden_size, pick_device("cpu"), torch.float32, 1, 12)
    x = torch.randn(1, 12, spec.hidden_size)
    prefill = mla.forward(x, 0)
    decode = mla.forward(x[:, -1:], 11)
    assert torch.allclose(prefill[:, -1], decode[:, 0], atol=1e-5)


def test_every_catalog_model_has_a_stand_in_for_every_layer(catalog_model):
    from servefit.adapters.catalog import model_ids
    from servefit.calibrate.synthetic import check_supported, layer_groups

    kinds = set()
    for model_id in model_ids():
        spec = catalog_model(model_id).spec
        check_supported(spec)  # raises, naming the layer, for anything the stack cannot build
        kinds |= {type(m).__name__ for layer, _ in layer_groups(spec) for m in layer.mixers}
    assert kinds == {"AttentionSpec", "MlaSpec", "LinearAttentionSpec", "MambaSpec"}


def test_a_layer_with_nothing_to_build_is_refused_by_name():
    spec = spec_from_hf_config(TINY_QWEN3_NEXT, name="tiny-empty")
    empty = replace(spec, layers=(*spec.layers[:1], LayerSpec(mixer=None, mlp=None)))
    with pytest.raises(InvalidArgumentError, match=r"layer 1 has neither.*--microbenchmarks-only"):
        run_calibration(empty, device_name="cpu", plan_name="tiny")
