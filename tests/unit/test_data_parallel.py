"""--data-parallel-size as vLLM runs it: N engine ranks of TP x PP GPUs, each with its own KV
cache; a MoE model's routed experts spread over all TP x DP GPUs (vLLM's
fused_moe/config.py FusedMoEParallelConfig.make, flatten_tp_across_dp), sliced or, with
--enable-expert-parallel, whole (EP = TP x DP); the ranks' MoE layers run every rank's
tokens together."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from click.testing import CliRunner

from servefit.cli.main import cli
from servefit.core.data_parallel import all_ranks, rank_workload, ranks_factor
from servefit.core.op_cost import decode_step
from servefit.core.ops import model_coeffs, step_ops
from servefit.core.plan import ServeSettings, plan_capacity
from servefit.core.tp_rules import tp_refusals
from servefit.core.weights import weight_bytes
from servefit.core.workload import fixed_workload
from servefit.errors import InvalidArgumentError
from servefit.preflight.vllm_args import parse_vllm_command

MOE = "Qwen/Qwen3-30B-A3B"  # 48 layers, 128 experts of 3 x 2048 x 768, top-8, 4 KV heads
DENSE = "meta-llama/Llama-3.1-8B-Instruct"
CODER = "Qwen/Qwen3-Coder-480B-A35B-Instruct"  # 62 layers, 8 KV heads of 128


def _plan(*args: str) -> tuple[int, dict]:
    result = CliRunner().invoke(cli, ["plan", *args, "--offline", "--json"])
    return result.exit_code, json.loads(result.output) if result.output.startswith("{") else {}


def test_the_experts_are_spread_over_tp_x_dp_and_the_rest_held_by_every_rank(catalog_model):
    spec = catalog_model(MOE).spec
    # the routed experts by hand: 48 layers x 128 experts x (gate, up, down) 2048 x 768, bf16
    experts_bytes = 48 * 128 * 3 * 2048 * 768 * 2
    one = weight_bytes(spec, tp=1)
    four = weight_bytes(spec, tp=1, dp=4)
    assert one.per_gpu_bytes - four.per_gpu_bytes == pytest.approx(experts_bytes * 3 / 4)
    # TP 2 x DP 2: the experts a quarter (as TP 4), the attention and embedding a half (TP 2)
    tp2 = weight_bytes(spec, tp=2)
    tp2_dp2 = weight_bytes(spec, tp=2, dp=2)
    assert tp2.per_gpu_bytes - tp2_dp2.per_gpu_bytes == pytest.approx(experts_bytes / 4)
    # what the 4 GPUs load in all: the experts once, the rest (and the buffers) 4 times
    rest = one.total_bytes - experts_bytes
    expected = experts_bytes + 4 * rest + 4 * one.buffer_bytes_per_gpu
    assert four.all_gpus_bytes(4) == pytest.approx(expected)
    # a dense model's DP ranks are plain replicas
    dense = catalog_model(DENSE).spec
    assert weight_bytes(dense, tp=1, dp=4).per_gpu_bytes == weight_bytes(dense).per_gpu_bytes


def test_without_ep_the_expert_slice_rules_see_tp_x_dp(catalog_model):
    # Qwen3-30B-A3B-FP8: intermediate 768 in fp8 blocks of 128; vLLM's refine finds a block
    # of gcd(128, 128, slice, 2048) >= 32 for a 192 slice (TP 4, refined to 64) but not for
    # a 48 slice (768 / 16, gcd 16), so TP 4 starts alone, and under DP 4 only with EP
    spec = catalog_model("Qwen/Qwen3-30B-A3B-FP8").spec
    assert tp_refusals(spec, 4) == ()
    refused = tp_refusals(spec, 4, dp=4)
    assert refused and any("48" in reason for reason in refused)
    assert tp_refusals(spec, 4, ep=True, dp=4) == ()
    code, _ = _plan("Qwen/Qwen3-30B-A3B-FP8", "--gpu", "H100", "-tp", "4", "-dp", "4")
    assert code == 2


def test_each_rank_holds_the_whole_kv_of_its_requests(catalog_model, gpu):
    # DP 8 x TP 1: every GPU keeps all 8 KV heads: 62 layers x 2 x 8 x 128 x 2 B = 248 KiB a
    # token, where TP 8 splits them to one head (31 KiB)
    spec = catalog_model(CODER).spec
    base = ServeSettings(max_model_len=32768, quantization="fp8", vllm_version="0.10")
    dp8 = plan_capacity(spec, gpu("H200"), replace(base, data_parallel_size=8))
    tp8 = plan_capacity(spec, gpu("H200"), replace(base, tensor_parallel_size=8))
    assert dp8.kv_bytes_per_token == 62 * 2 * 8 * 128 * 2
    assert tp8.kv_bytes_per_token == 62 * 2 * 1 * 128 * 2
    assert dp8.settings.num_gpus == tp8.settings.num_gpus == 8
    assert dp8.settings.gpus_per_rank == 1
    with_ep = plan_capacity(
        spec, gpu("H200"), replace(base, data_parallel_size=8, enable_expert_parallel=True)
    )
    assert with_ep.settings.expert_parallel_size == 8


def test_the_flag_reaches_the_command_and_the_documents():
    code, doc = _plan(
        CODER,
        "--gpu",
        "H200",
        "-dp",
        "8",
        "-ep",
        "--quantization",
        "fp8",
        "--max-model-len",
        "32768",
        "--concurrency",
        "16",
    )
    assert code == 0
    assert "--data-parallel-size 8" in doc["vllm_command"]
    assert doc["settings"]["data_parallel_size"] == 8
    assert doc["gpu"]["count"] == 8
    for flag in ("--data-parallel-size", "-dp", "--data_parallel_size"):
        read = parse_vllm_command(["vllm", "serve", CODER, flag, "4"])
        assert read.settings["data_parallel_size"] == 4, flag


def test_a_dense_models_ranks_serve_their_share_at_one_ranks_speed():
    # 16 requests on 2 ranks: each rank runs 8, as one GPU alone at concurrency 8 does
    common = [DENSE, "--gpu", "H100", "--max-model-len", "8192", "--num-requests", "64"]
    code, two = _plan(*common, "-dp", "2", "--concurrency", "16")
    assert code == 0
    code, one = _plan(*common, "--num-requests", "32", "--concurrency", "8")
    assert code == 0
    p2, p1 = two["performance"], one["performance"]
    assert p2["tpot_s"] == pytest.approx(p1["tpot_s"])
    assert p2["ttft_s"] == pytest.approx(p1["ttft_s"])
    assert p2["output_throughput_tok_per_s"] == pytest.approx(2 * p1["output_throughput_tok_per_s"])


def test_a_moe_rank_steps_with_every_ranks_tokens(catalog_model):
    # one decode token on each of 4 EP ranks: the MoE layer routes 4 tokens x top-8 over 128
    # experts, each rank holding 32 of them; uniform routing touches
    # 128 x (1 - (1 - 8/128)^4) experts in all, a quarter of them on this rank
    spec = catalog_model(MOE).spec
    m = model_coeffs(spec, tp=1, ep=4, dp=4)
    routed = next(op for op in step_ops(m, decode_step(1, 100)) if "routed" in op.name)
    touched = 128 * (1 - (1 - 8 / 128) ** 4) / 4
    per_expert = 3 * 2048 * 768 * 2  # bytes, whole experts under EP
    assert routed.weight_bytes == pytest.approx(48 * touched * per_expert)
    # 4 tokens x top-8 x 32 / 128 of them are this rank's: 8 expert rows, 2 x params each
    assert routed.flops == pytest.approx(2 * 8 * 3 * 2048 * 768 * 48)


def test_the_share_of_the_load_and_the_figures_of_all_ranks():
    w = fixed_workload(1024, 256, concurrency=10)
    assert rank_workload(w, 8).concurrency == 2  # the busiest rank's
    assert ranks_factor(w, 8) == 5.0  # 10 requests are five such ranks' worth
    rate = fixed_workload(1024, 256, concurrency=None, request_rate_per_s=8.0)
    assert rank_workload(rate, 4).request_rate_per_s == 2.0 and ranks_factor(rate, 4) == 4.0
    assert rank_workload(w, 1) is w
    assert ranks_factor(w, 1) == 1.0
    # fewer requests in flight than ranks: one each on the busiest (3 on 4 ranks)
    assert rank_workload(fixed_workload(1024, 256, concurrency=3), 4).concurrency == 1
    # a fixed count of requests spreads too, rounded up: 100 on 8 -> 13, 3 on 8 -> 1
    counted = replace(w, num_requests=100)
    assert rank_workload(counted, 8).num_requests == 13
    assert rank_workload(replace(w, num_requests=3), 8).num_requests == 1
    assert rank_workload(w, 8).num_requests is None  # none asked, none set


def test_all_ranks_multiplies_counts_and_throughputs_not_latencies():
    from servefit.core.serving_types import LoadResult

    fields = dict.fromkeys(LoadResult.__dataclass_fields__, 1.0)
    load = LoadResult(
        **{
            **fields,
            "concurrency": 2,
            "request_rate_per_s": None,
            "num_requests": 10,
            "num_preemptions": 1,
            "num_input_tokens": 100,
            "num_cached_tokens": 20,
            "num_output_tokens": 50,
            "num_sessions": 10,
            "turns": 1,
            "max_batch": 2,
            "total_throughput_tok_per_s": 3.0,
            "request_throughput_per_s": 7.0,
            "goodput_per_s": 11.0,
            "session_throughput_per_s": 17.0,
            "time_by_bound_s": {},
            "by_turn": (),
            "ttft_s": "ttft",
            "tpot_s": "tpot",
            "e2e_s": "e2e",
            "session_e2e_s": "session",
            "bound": "memory",
        }
    )
    # 10 requests on 8 ranks: 2 on the busiest, five such ranks' worth (f = 5)
    whole = all_ranks(load, fixed_workload(1024, 256, concurrency=10), 8)
    assert whole.concurrency == 10 and whole.request_rate_per_s is None
    assert whole.num_requests == 50 and whole.num_output_tokens == 250
    assert whole.output_throughput_tok_per_s == 5.0
    assert whole.total_throughput_tok_per_s == 15.0
    assert whole.request_throughput_per_s == 35.0
    assert whole.goodput_per_s == 55.0
    assert whole.session_throughput_per_s == 85.0
    assert (whole.num_preemptions, whole.num_input_tokens, whole.num_cached_tokens) == (5, 500, 100)
    assert whole.num_sessions == 50
    assert (whole.ttft_s, whole.tpot_s, whole.busy_s, whole.mean_batch) == ("ttft", "tpot", 1, 1)
    # an open loop: 8 requests a second over 4 ranks, f = 4; no SLO, no goodput
    rate = fixed_workload(1024, 256, concurrency=None, request_rate_per_s=8.0)
    open_loop = all_ranks(replace(load, goodput_per_s=None), rate, 4)
    assert open_loop.request_rate_per_s == 8.0 and open_loop.concurrency is None
    assert open_loop.goodput_per_s is None and open_loop.num_requests == 40
    # one rank is the deployment
    assert all_ranks(load, fixed_workload(1024, 256, concurrency=2), 1) is load


def test_v0_releases_are_refused_naming_the_flag():
    code, _ = _plan(DENSE, "--gpu", "H100", "-dp", "2", "--vllm-version", "0.6")
    assert code == 2
    result = CliRunner().invoke(cli, ["plan", DENSE, "--gpu", "H100", "-dp", "0", "--offline"])
    assert result.exit_code == 2 and "--data-parallel-size" in result.output
    with pytest.raises(InvalidArgumentError, match="--data-parallel-size"):
        ServeSettings(data_parallel_size=0)


# -- the profile run's MoE buffers under DP (core/memory.py activation_peak_bytes) -------------


def test_the_fused_moe_chunk_follows_the_release():
    from servefit.core.engine import moe_chunk_tokens, vllm_behaviour

    # VLLM_FUSED_MOE_CHUNK_SIZE's default: "32768" in v0.10 envs.py, str(16 * 1024) later,
    # and no chunk at all once the modular kernel sizes its workspace for the whole batch
    assert moe_chunk_tokens((0, 10)) == 32_768
    assert moe_chunk_tokens((0, 11)) == 16_384
    assert moe_chunk_tokens((0, 31)) == 16_384
    assert moe_chunk_tokens((0, 32)) is None
    assert vllm_behaviour("0.10").fused_moe_chunk_tokens == 32_768


def _moe_peak(spec, **kw) -> int:
    from servefit.core.memory import activation_peak_bytes

    base = {
        "tp": 1,
        "max_num_batched_tokens": 8192,
        "max_num_seqs": 1,
        "is_last_stage": False,  # no sampler: the MoE buffers and the dense pass alone
    }
    return activation_peak_bytes(spec, range(len(spec.layers)), **{**base, **kw})


def test_dp_ranks_size_their_moe_buffers_for_every_rank_s_tokens(catalog_model):
    spec = catalog_model(CODER).spec
    # by hand: top-8 of experts 2560 wide, hidden 6144, bf16 activations: a token's buffers
    # are 8 x (3 x 2560 + 6144) x 2 = 221,184 bytes with whole experts (EP)
    per_token = 8 * (3 * 2560 + 6144) * 2
    one = _moe_peak(spec, expert_parallel=True, moe_chunk_tokens=32_768)
    # DP 8: 8 x 8,192 = 65,536 tokens gathered, the buffers capped at the 32,768 chunk, and
    # the 7 other ranks' 8,192 hidden states in and their sums out
    eight = _moe_peak(spec, dp=8, expert_parallel=True, moe_chunk_tokens=32_768)
    gathered = 2 * 7 * 8192 * 6144 * 2
    assert eight - one == (32_768 - 8192) * per_token + gathered
    # no chunk (vLLM 0.32): buffers for all 65,536 tokens
    whole = _moe_peak(spec, dp=8, expert_parallel=True)
    assert whole - eight == (65_536 - 32_768) * per_token
    # without EP each expert is sliced over TP x DP = 8 GPUs: 2560 / 8 = 320 wide
    sliced = _moe_peak(spec, dp=8, moe_chunk_tokens=32_768)
    assert eight - sliced == 32_768 * 8 * 3 * (2560 - 320) * 2
    # a dense model gathers nothing
    dense = catalog_model(DENSE).spec
    assert _moe_peak(dense, dp=8) == _moe_peak(dense)


@pytest.mark.parametrize(("gmu", "logged_gib"), [("0.9", 48.66), ("0.95", 55.65)])
def test_qwen3_coder_480b_dp8_ep_kv_memory_is_the_logged_one(gmu, logged_gib):
    # vllm-project/recipes#12 (vLLM v0.10.1.dev101, 8 x H20 141 GB, -dp 8
    # --enable-expert-parallel, the FP8 checkpoint): "available KV cache memory (48.66 GiB)"
    # at the default 0.9 and 55.65 GiB at 0.95. Without the gathered tokens servefit
    # predicted 54.18 / 61.17 GiB (+11 %, +10 %).
    code, doc = _plan(
        CODER,
        *("--gpu", "H20", "--gpu-memory-gib", "140.4", "-dp", "8", "--enable-expert-parallel"),
        *("--quantization", "fp8", "--vllm-version", "0.10", "--gpu-memory-utilization", gmu),
        "--no-performance",
    )
    predicted_gib = doc["memory"]["kv_cache_memory_bytes"] / 2**30
    assert predicted_gib == pytest.approx(logged_gib, rel=0.03)
    # and, as vLLM did, it refuses the 262,144-token context (62.00 GiB a request)
    assert code == 1 and not doc["verdict"]["fits"]


# -- the --num-gpus search: a MoE model's DP ranks as one engine ------------------------------


def test_the_layout_search_tries_a_moe_model_s_dp_ranks_as_one_engine():
    from servefit.core.scaling import Layout, candidate_layouts, layout_commands

    moe = {lay.label: lay for lay in candidate_layouts(8, 8, is_moe=True)}
    one = moe["TP1 x PP1 x DP8 in one engine + EP"]
    assert one.num_gpus == 8 and one.expert_parallel_size == 8  # EP = TP x DP
    assert moe["TP2 x PP1 x DP4 in one engine + EP"].expert_parallel_size == 8
    assert moe["TP2 x PP1 x DP4 + EP"].expert_parallel_size == 2  # replicas: EP = TP
    assert moe["TP1 x PP1 x DP8 in one engine"].expert_parallel_size == 1  # sliced 8 ways
    assert "TP8 x PP1 x DP1 in one engine" not in moe  # one rank is no DP
    # a dense model's ranks in one engine are replicas: not tried twice
    assert not any(lay.one_engine for lay in candidate_layouts(8, 8, is_moe=False))
    # one engine is one command with --data-parallel-size; MoE replicas are separate servers
    assert layout_commands("m", one, 8) == (
        "vllm serve m --tensor-parallel-size 1 --data-parallel-size 8 --enable-expert-parallel",
    )
    replicas = layout_commands("m", Layout(tp=2, pp=1, dp=4), 8, is_moe=True)
    assert not any("--data-parallel-size" in c for c in replicas)
    assert "x 4 replicas" in replicas[-1]


def test_num_gpus_plans_qwen3_coder_480b_as_one_dp_ep_engine():
    # 480B parameters in FP8: 449 GiB of weights, which no single H200 holds
    result = CliRunner().invoke(
        cli,
        [
            *("plan", CODER, "--gpu", "H200", "--quantization", "fp8", "--num-gpus", "8"),
            *("--max-model-len", "32768", "--input-len", "2048", "--output-len", "512"),
            *("--concurrency", "64", "--offline", "--json"),
        ],
    )
    doc = json.loads(result.output)
    layouts = {row["layout"]: row for row in doc["scaling"]["layouts"]}
    assert layouts["TP1 x PP1 x DP8 in one engine + EP"]["fits"]
    assert layouts["TP8 x PP1 x DP1"]["fits"]
    assert not layouts["TP1 x PP1 x DP8"]["fits"]  # eight 1-GPU replicas of 480B
    # a replica of 2 GPUs holds half of every expert (224.6 GiB a GPU): no; one engine of
    # four such ranks spreads the experts over all 8 GPUs: yes
    assert not layouts["TP2 x PP1 x DP4"]["fits"]
    assert layouts["TP2 x PP1 x DP4 in one engine"]["fits"]
    # the verdict is the chosen layout's plan, and its command launches that layout
    best = layouts[doc["scaling"]["best"]]
    dp = best["data_parallel_size"] if best["one_engine"] else 1
    assert doc["settings"]["data_parallel_size"] == dp
    assert doc["settings"]["tensor_parallel_size"] == best["tensor_parallel_size"]
    command = doc["vllm_command"]
    assert ("--enable-expert-parallel" in command) == best["expert_parallel"]
    assert (f"--data-parallel-size {dp}" in command) == (dp > 1)


def test_a_traces_requests_are_dealt_to_the_ranks_in_turn():
    from servefit.core.workload import LengthDist, RequestSpec, Workload

    trace = tuple(RequestSpec(arrival_s=None, input_len=100 + i, output_len=10) for i in range(10))
    w = Workload(
        input_len=LengthDist(mean=104),
        output_len=LengthDist(mean=10),
        concurrency=8,
        requests=trace,
    )
    rank = rank_workload(w, 4)
    # requests 0, 4, 8 go to the first rank (the busiest: 3 of the 10)
    assert [r.input_len for r in rank.requests] == [100, 104, 108]
    assert rank.concurrency == 2 and rank.resolved_num_requests() == 3
    assert rank.request_rate_per_s is None
    # an open loop over the trace: each rank gets a quarter of the rate
    poisson = replace(w, concurrency=None, request_rate_per_s=8.0)
    assert rank_workload(poisson, 4).request_rate_per_s == 2.0
    assert rank_workload(poisson, 4).concurrency is None
