"""Speculative decoding: ``--speculative-config`` read as vLLM reads it, what the drafter adds
to memory (weights, KV layers, state), and the step time it buys. Hand calculations are
written out; the start-up logs that hold the capacity rules to the token are in
benchmarks/fidelity/startup_logs.json (GB10, MTP k=2 and its baseline)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from servefit.adapters.speculative_config import read_speculative_config
from servefit.bench import server_metrics
from servefit.core import drafter
from servefit.core.kv_pages import state_bytes
from servefit.core.model_spec import LinearAttentionSpec
from servefit.core.ops import StepShape, decode_step, model_coeffs
from servefit.core.perf import make_timer
from servefit.core.plan import ServeSettings, plan_capacity
from servefit.core.speculative import Acceptance, SpecMethod, Speculation
from servefit.core.speculative_timing import speculative_timer
from servefit.core.vllm_command import vllm_serve_args
from servefit.errors import InvalidArgumentError
from servefit.preflight.vllm_args import parse_vllm_command
from servefit.units import GIB_BYTES

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
# An EAGLE-3 head of Llama-3.1-8B as such heads are built (EAGLE-3 paper, vLLM's
# LlamaForCausalLMEagle3): one decoder layer of the target's widths, its own 32,000-row
# vocabulary; written here for the hand calculations below, not a published file
EAGLE3_LLAMA_8B_CONFIG = {
    "architectures": ["LlamaForCausalLMEagle3"],
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "num_hidden_layers": 1,
    "vocab_size": 128256,
    "draft_vocab_size": 32000,
    "max_position_embeddings": 2048,
    "rms_norm_eps": 1e-05,
    "rope_theta": 500000.0,
    "torch_dtype": "float16",
    "tie_word_embeddings": False,
}


def spec(text: str, version: str | None = "0.33"):
    return read_speculative_config(text, version)


# --- the flag ------------------------------------------------------------------------------


def test_the_method_is_read_as_vllm_reads_it():
    assert spec('{"model": "ngram", "num_speculative_tokens": 3}').method is SpecMethod.NGRAM
    assert spec('{"model": "org/draft", "num_speculative_tokens": 3}').method is (
        SpecMethod.DRAFT_MODEL
    )
    # a model-specific MTP name is "mtp" (vLLM 0.12+ warns it is deprecated)
    assert spec('{"method": "deepseek_mtp", "num_speculative_tokens": 1}').method is SpecMethod.MTP
    assert spec('{"method": "qwen3_5_mtp", "num_speculative_tokens": 2}').method is SpecMethod.MTP


def test_ngram_takes_vllm_default_window():
    sc = spec('{"method": "ngram", "num_speculative_tokens": 3}')
    assert (sc.prompt_lookup_min, sc.prompt_lookup_max) == (5, 5)  # vLLM's "arbitrary" 5/5
    sc = spec('{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4}')
    assert (sc.prompt_lookup_min, sc.prompt_lookup_max) == (4, 4)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ('{"method": "ngram"}', "num_speculative_tokens is required"),
        ('{"method": "ngram", "num_speculative_tokens": 0}', "positive integer"),
        ('{"method": "ngram", "num_speculative_tokens": 3, "k": 2}', "'k' is not a field"),
        ('{"method": "eagle3", "num_speculative_tokens": 3}', "needs 'model'"),
        ('{"method": "medusa", "model": "m", "num_speculative_tokens": 3}', "not planned"),
        ('{"method": "lookahead", "num_speculative_tokens": 3}', "unknown method"),
        (
            '{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 6, '
            '"prompt_lookup_max": 4}',
            "must be <=",
        ),
        ('{"method": "ngram", num_speculative_tokens: 3}', "is not JSON"),
        ("[1, 2]", "JSON object"),
    ],
)
def test_a_config_vllm_refuses_is_refused_naming_what_to_fix(text, words):
    with pytest.raises(InvalidArgumentError, match=words):
        spec(text)


@pytest.mark.parametrize(
    ("method", "refused_in", "taken_in"),
    # read in the wheels: eagle3 arrives in 0.9.2, suffix in 0.12.0, a draft model in V1 in
    # 0.16.0 (0.14.0's arg_utils raises "Draft model speculative decoding is not supported")
    [("eagle3", "0.8", "0.9"), ("suffix", "0.11", "0.12"), ("draft_model", "0.14", "0.16")],
)
def test_a_method_is_refused_before_the_release_that_has_it(method, refused_in, taken_in):
    text = json.dumps({"method": method, "model": "org/head", "num_speculative_tokens": 2})
    with pytest.raises(InvalidArgumentError, match=f"arrives in {taken_in}"):
        spec(text, refused_in)
    assert spec(text, taken_in).method.value == method


def test_the_command_line_carries_the_flag_both_ways():
    given = '{"method":"ngram","num_speculative_tokens":3,"prompt_lookup_max":4}'
    for args in (
        ["--speculative-config", given],
        ["-sc", given],
        [f"--speculative_config={given}"],
    ):
        read = parse_vllm_command(["vllm", "serve", "m", *args]).settings["speculative"]
        assert read.k == 3 and read.prompt_lookup_max == 4


# --- acceptance ----------------------------------------------------------------------------


def test_expected_tokens_per_step_for_a_constant_rate():
    a, k = 0.7, 3
    acceptance = Acceptance.constant(a, k, source="test")
    # (1 - a^(k+1)) / (1 - a) = (1 - 0.2401) / 0.3 = 2.533
    assert acceptance.expected_tokens_per_step(k) == pytest.approx((1 - a**4) / (1 - a))
    assert acceptance.expected_tokens_per_step(k) == pytest.approx(2.533, abs=1e-3)
    # vLLM's acceptance rate: accepted / drafted = (0.7 + 0.49 + 0.343) / 3
    assert acceptance.acceptance_rate(k) == pytest.approx(1.533 / 3, abs=1e-3)


def test_a_mean_acceptance_length_gives_back_its_rate():
    acceptance = Acceptance.from_mean_length(3.08, 4, source="test")
    assert acceptance.expected_tokens_per_step(4) == pytest.approx(3.08, rel=1e-9)


def test_more_positions_than_measured_keep_the_last_ratio():
    measured = Acceptance(per_position=(0.8, 0.6), source="run")
    assert measured.at(4) == pytest.approx((0.8, 0.6, 0.45, 0.3375))


# --- capacity ------------------------------------------------------------------------------


def _eagle3(catalog_model):
    from servefit.core.hf_config import spec_from_hf_config
    from servefit.core.speculative import DraftNetwork

    head = spec_from_hf_config(EAGLE3_LLAMA_8B_CONFIG, name="eagle3-head")
    return DraftNetwork(spec=head, draft_vocab_size=EAGLE3_LLAMA_8B_CONFIG["draft_vocab_size"])


def test_an_eagle_head_adds_one_kv_layer(catalog_model, gpu):
    target = catalog_model(LLAMA).spec
    memory = 20 * GIB_BYTES
    sc = spec('{"method": "eagle3", "model": "head", "num_speculative_tokens": 3}')
    base = plan_capacity(target, gpu("H100-SXM"), ServeSettings(kv_cache_memory_bytes=memory))
    with_head = plan_capacity(
        target,
        gpu("H100-SXM"),
        ServeSettings(kv_cache_memory_bytes=memory, speculative=sc, draft=_eagle3(catalog_model)),
    )
    # a page of one layer: 2 x 16 tokens x 8 KV heads x 128 x 2 bytes = 65,536; 32 layers
    # share a block id without the head, 33 with it
    assert base.kv_cache_tokens == memory // 65_536 // 32 * 16 == 163_840
    assert with_head.kv_cache_tokens == memory // 65_536 // 33 * 16 == 158_864


def test_an_eagle3_head_weighs_its_layer_fc_and_own_head(catalog_model, gpu):
    target = catalog_model(LLAMA).spec
    draft = _eagle3(catalog_model)
    sc = spec('{"method": "eagle3", "model": "head", "num_speculative_tokens": 3}')
    got = drafter.weight_bytes_per_gpu(
        target, sc, draft, tp=1, capability=(9, 0), has_triton_kernels=True
    )
    h, kv, mlp = 4096, 1024, 14336
    layer = 2 * h * h + 2 * h * kv + 3 * h * mlp + 2 * h  # q, o; k, v; gate, up, down; norms
    final_norm = h
    fc = 3 * h * h  # three hidden states in, one out
    wide_qkv = h * (h + 2 * kv)  # the first layer's q/k/v read [embedding, hidden]
    own_head = 32_000 * h  # draft_vocab_size rows; the embedding is the target's
    rope_table = draft.spec.rope_cache_positions * sum(draft.spec.rope_cache_dims) * 2
    assert got == (layer + final_norm + fc + wide_qkv + own_head) * 2 + rope_table  # float16


def test_ngram_adds_nothing_to_memory(catalog_model, gpu):
    target = catalog_model(LLAMA).spec
    settings = ServeSettings(max_model_len=8192)
    sc = spec('{"method": "ngram", "num_speculative_tokens": 4}')
    base = plan_capacity(target, gpu("H100-SXM"), settings)
    ngram = plan_capacity(
        target, gpu("H100-SXM"), ServeSettings(max_model_len=8192, speculative=sc)
    )
    assert ngram.kv_cache_tokens == base.kv_cache_tokens
    assert ngram.memory.weights_bytes == base.memory.weights_bytes
    assert any("on the CPU" in a for a in ngram.assumptions)


def test_mtp_loads_the_checkpoints_mtp_layer(catalog_model, gpu):
    """The GB10 logs of nvidia/Qwen3.6-27B-NVFP4 print 'Model loading took 19.78 GiB'
    without MTP and 20.57 GiB with it (the MTP layer stays bf16 in that export): 0.79 GiB."""
    target = catalog_model("Qwen/Qwen3.6-27B").spec
    sc = spec('{"method": "mtp", "num_speculative_tokens": 2}')
    got = drafter.weight_bytes_per_gpu(
        target, sc, None, tp=1, capability=(12, 1), has_triton_kernels=True
    )
    assert got / GIB_BYTES == pytest.approx(20.57 - 19.78, abs=0.01)


def test_a_state_layer_holds_the_speculative_tokens_conv_steps(catalog_model):
    """Qwen3.6-27B's Gated DeltaNet: conv_dim = 2 x 16 key heads x 128 + 48 value heads x 128
    = 10,240; k speculative tokens add k conv steps of it (vLLM 0.32 mamba_utils.py)."""
    layer = next(
        m
        for layer in catalog_model("Qwen/Qwen3.6-27B").spec.layers
        for m in layer.mixers
        if isinstance(m, LinearAttentionSpec)
    )
    without = state_bytes(layer, 1, 2, 4)
    assert state_bytes(layer, 1, 2, 4, num_spec=2) - without == 2 * 10_240 * 2


@pytest.mark.parametrize(
    ("model", "text", "words", "settings"),
    [
        (LLAMA, '{"method": "mtp", "num_speculative_tokens": 1}', "has none", {}),
        (LLAMA, '{"method": "ngram", "num_speculative_tokens": 2}', "pipeline", {"pp": 2}),
        (
            LLAMA,
            '{"method": "ngram", "num_speculative_tokens": 2, "draft_tensor_parallel_size": 3}',
            "neither 1 nor",
            {"tp": 2},
        ),
    ],
)
def test_a_drafter_servefit_cannot_place_is_refused(
    catalog_model, gpu, model, text, words, settings
):
    s = ServeSettings(
        tensor_parallel_size=settings.get("tp", 1),
        pipeline_parallel_size=settings.get("pp", 1),
        max_model_len=8192,
        speculative=spec(text),
    )
    with pytest.raises(InvalidArgumentError, match=words):
        plan_capacity(catalog_model(model).spec, gpu("H100-SXM"), s)


def test_the_launch_command_carries_the_config(catalog_model, gpu):
    sc = spec('{"method":"ngram","num_speculative_tokens":3}')
    s = ServeSettings(max_model_len=8192, speculative=sc)
    plan = plan_capacity(catalog_model(LLAMA).spec, gpu("H100-SXM"), s)
    args = vllm_serve_args(LLAMA, plan, s)
    assert (
        args[args.index("--speculative-config") + 1]
        == '{"method":"ngram","num_speculative_tokens":3}'
    )


# --- speed ---------------------------------------------------------------------------------


def _timers(catalog_model, gpu, rate: float, k: int):
    from servefit.adapters.catalog import efficiency_table

    device = gpu("H100-SXM")
    profile = efficiency_table().for_gpu(device, "vllm")
    target = catalog_model(LLAMA).spec
    sc = spec(json.dumps({"method": "eagle3", "model": "head", "num_speculative_tokens": k}))
    head = _eagle3(catalog_model)
    speculation = Speculation(
        config=sc,
        acceptance=Acceptance.constant(rate, k, source="test"),
        draft=drafter.timing_spec(target, sc, head),
    )
    m = model_coeffs(target)
    base = make_timer(m, device, profile)
    # a draft pass pays the profile's draft_pass_overhead_s, not a whole step's overhead
    per_pass = replace(
        profile, step_overhead_s=profile.draft_pass_overhead_s, per_seq_overhead_s=0.0
    )
    draft_timer = make_timer(model_coeffs(speculation.draft), device, per_pass)
    return base, draft_timer, speculative_timer(m, device, profile, speculation), speculation


def test_a_decode_step_is_the_verification_and_the_drafts_over_the_tokens_kept(catalog_model, gpu):
    base, draft, timer, speculation = _timers(catalog_model, gpu, 0.7, 3)
    contexts = (1000, 2000)
    verify = base(StepShape(decode_contexts=contexts, decode_query_tokens=4)).time_s
    drafts = 3 * draft(StepShape(decode_contexts=contexts)).time_s
    expected = (verify + drafts) / speculation.expected_tokens_per_step
    assert timer(StepShape(decode_contexts=contexts)).time_s == pytest.approx(expected)


def test_a_draft_pass_pays_its_own_overhead_not_a_steps(catalog_model, gpu):
    from servefit.adapters.catalog import efficiency_table

    profile = efficiency_table().for_gpu(gpu("H100-SXM"), "vllm")
    # vLLM's profile: a step's fixed cost 1.6 ms + 20 us a sequence, a draft pass's 0.8 ms
    assert (profile.step_overhead_s, profile.draft_pass_overhead_s) == (0.0016, 0.0008)
    _, draft, _, _ = _timers(catalog_model, gpu, 0.7, 3)
    assert draft(StepShape(decode_contexts=(1000, 2000))).overhead_s == pytest.approx(0.0008)


def test_speculation_pays_at_batch_one_and_less_when_compute_bound(catalog_model, gpu):
    base, _, timer, _ = _timers(catalog_model, gpu, 0.7, 3)
    speedup = {
        batch: base(decode_step(batch, 2000)).time_s / timer(decode_step(batch, 2000)).time_s
        for batch in (1, 512)
    }
    assert speedup[1] > 1.3  # memory-bound: verifying 4 tokens costs about what 1 does
    assert speedup[512] < speedup[1]


def test_drafts_nobody_accepts_only_cost(catalog_model, gpu):
    base, _, timer, _ = _timers(catalog_model, gpu, 0.0, 3)
    assert timer(decode_step(1, 2000)).time_s > base(decode_step(1, 2000)).time_s


# --- bench ---------------------------------------------------------------------------------


def test_bench_reads_vllms_spec_decode_counters():
    """The counters a vLLM 0.32 CPU server printed after one ngram request (k=3)."""
    before = "\n".join(
        [
            'vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 0.0',
            'vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 0.0',
            'vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 0.0',
        ]
    )
    after_lines = [
        'vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 6.0',
        'vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 13.0',
        'vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 9.0',
    ] + [
        f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="m",'
        f'position="{i}"}} {n}'
        for i, n in enumerate((6.0, 2.0, 1.0))
    ]
    after = "\n".join(after_lines)

    def counters(text):
        parsed = list(server_metrics.samples(text + "\n"))
        return server_metrics.normalise(server_metrics.sums(parsed)) | server_metrics.per_position(
            parsed
        )

    out = server_metrics.deltas(counters(before), counters(after))
    assert out["spec_decode_acceptance_rate"] == pytest.approx(9 / 13)
    assert out["spec_decode_mean_acceptance_length"] == pytest.approx(1 + 9 / 6)
    assert out["spec_decode_acceptance_pos_0"] == pytest.approx(1.0)
    assert out["spec_decode_acceptance_pos_2"] == pytest.approx(1 / 6)


def test_the_plan_says_what_speculation_buys_and_the_fastest_k(catalog_model, gpu):
    from servefit.adapters.catalog import efficiency_table
    from servefit.core.perf import plan_performance
    from servefit.core.workload import fixed_workload

    device = gpu("H100-SXM")
    profile = efficiency_table().for_gpu(device, "vllm")
    target = catalog_model(LLAMA).spec
    sc = spec('{"method": "ngram", "num_speculative_tokens": 3}')
    speculation = Speculation(
        config=sc, acceptance=Acceptance.constant(0.6, 3, source="test"), draft=None
    )
    workload = fixed_workload(512, 128, concurrency=8)
    settings = ServeSettings(max_model_len=8192, speculative=sc)
    plan = plan_capacity(target, device, settings)
    with_it = plan_performance(plan, workload, profile, speculation=speculation)
    without = plan_performance(plan, workload, profile)
    g = with_it.speculation
    assert g is not None and without.speculation is None
    assert g.tpot_batch1_without_s == without.tpot_batch1_s
    assert g.tpot_without_s == without.tpot_s
    assert dict(g.tpot_batch1_by_k_s)[3] == with_it.tpot_batch1_s
    assert g.best_k_batch1 == min(g.tpot_batch1_by_k_s, key=lambda kv: kv[1])[0]
    assert with_it.tpot_s < without.tpot_s  # memory-bound at 8: the drafts pay


def test_check_log_holds_the_drafters_layout_lines(tmp_path):
    """The GB10 log of nvidia/Qwen3.6-27B-NVFP4 with MTP k=2 (the fidelity corpus): vLLM set
    the attention block to 1,600 tokens and added 3 padding layers; so does the plan."""
    from click.testing import CliRunner
    from tests.corpus import STARTUP_LOGS

    from servefit.cli.main import cli

    case = next(
        c
        for c in json.loads(STARTUP_LOGS.read_text())["cases"]
        if "GB10" in c["name"] and "MTP k=2" in c["name"]
    )
    log = tmp_path / "vllm.log"
    log.write_text("\n".join(case["log_lines"]) + "\n")
    result = CliRunner().invoke(cli, ["check-log", str(log), "--gpu", "GB10", "--offline"])
    assert result.exit_code == 0, result.output
    assert "= block_size: logged 1,600, planned 1,600" in result.output
    assert "= kv_padding_layers: logged 3, planned 3" in result.output
    assert "given the logged KV memory 1,394,129" in result.output


def test_a_draft_model_loads_whole_and_adds_its_layers(catalog_model, gpu):
    """Llama-3.2-1B drafting for Llama-3.1-8B (the same 128,256-token vocabulary): vLLM shares
    neither embedding nor LM head with a draft model (draft_model.py), so its whole weight
    is added; its 16 layers of 8 KV heads x 64 dims join the target's 32 of 8 x 128."""
    from servefit.core.speculative import DraftNetwork
    from servefit.core.weights import weight_bytes

    target = catalog_model(LLAMA).spec
    small = catalog_model("meta-llama/Llama-3.2-1B-Instruct").spec
    sc = spec('{"model": "meta-llama/Llama-3.2-1B-Instruct", "num_speculative_tokens": 4}')
    assert sc.method is SpecMethod.DRAFT_MODEL
    draft = DraftNetwork(spec=small)
    got = drafter.weight_bytes_per_gpu(
        target, sc, draft, tp=1, capability=(9, 0), has_triton_kernels=True
    )
    assert got == weight_bytes(small, tp=1, capability=(9, 0)).per_gpu_bytes
    memory = 20 * GIB_BYTES
    plan = plan_capacity(
        target,
        gpu("H100-SXM"),
        ServeSettings(kv_cache_memory_bytes=memory, speculative=sc, draft=draft),
    )
    # one block id holds 16 tokens of every layer: 32 x 65,536 + 16 x 32,768 bytes
    assert plan.kv_cache_tokens == memory // (32 * 65_536 + 16 * 32_768) * 16


def test_a_draft_model_of_another_vocabulary_is_refused(catalog_model):
    from servefit.core.speculative import DraftNetwork

    target = catalog_model(LLAMA).spec
    other = catalog_model("Qwen/Qwen3-0.6B").spec
    sc = spec('{"model": "Qwen/Qwen3-0.6B", "num_speculative_tokens": 4}')
    with pytest.raises(InvalidArgumentError, match="vocabulary"):
        drafter.weight_bytes_per_gpu(
            target, sc, DraftNetwork(spec=other), tp=1, capability=None, has_triton_kernels=True
        )


@pytest.mark.parametrize("engine", ["sglang", "trtllm"])
def test_another_engine_is_refused_the_vllm_flag(engine):
    from click.testing import CliRunner

    from servefit.cli.main import cli

    result = CliRunner().invoke(
        cli,
        [
            "plan",
            "Qwen/Qwen3-8B",
            "--gpu",
            "H100",
            "--engine",
            engine,
            "--offline",
            "--speculative-config",
            '{"method": "ngram", "num_speculative_tokens": 3}',
        ],
    )
    assert result.exit_code == 2
    assert "vLLM's flag" in result.output and engine in result.output
