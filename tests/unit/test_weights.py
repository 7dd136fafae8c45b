"""Parameter counts and weight bytes per GPU."""

import pytest

from servefit.core.weights import (
    Role,
    count_params,
    pipeline_layer_split,
    weight_bytes,
    weight_tensors,
)
from servefit.units import GIB_BYTES


def test_llama_31_8b_exact_count(catalog_model):
    spec = catalog_model("meta-llama/Llama-3.1-8B").spec
    # Hand calculation (vocab 128256, hidden 4096, 32 layers, 8 KV heads x 128, FFN 14336):
    embed = 128_256 * 4096  # input embedding; the LM head is untied: same again
    per_layer = (
        4096 * 4096  # q_proj
        + 2 * 4096 * 1024  # k_proj, v_proj (8 KV heads x 128)
        + 4096 * 4096  # o_proj
        + 3 * 4096 * 14_336  # gate, up, down
        + 2 * 4096  # two RMSNorms
    )
    expected = 2 * embed + 32 * per_layer + 4096
    assert expected == 8_030_261_248  # the figure on the model's Hugging Face page
    assert count_params(spec).total == expected


def test_moe_active_params_mixtral(catalog_model):
    counts = count_params(catalog_model("mistralai/Mixtral-8x7B-v0.1").spec)
    # 6 of 8 experts idle per token: 32 layers x 6 x (3 x 4096 x 14336)
    assert counts.total - counts.active == 32 * 6 * 3 * 4096 * 14_336


def test_total_is_sum_of_tensors(catalog_model):
    spec = catalog_model("Qwen/Qwen3.6-27B-FP8").spec
    counts = count_params(spec)
    by_tensor = sum(t.num_params for t in weight_tensors(spec) if t.role is not Role.MTP)
    assert counts.total == by_tensor


def test_tp2_halves_sharded_weights_kv_replication(catalog_model):
    spec = catalog_model("Qwen/Qwen2.5-7B").spec  # 4 KV heads
    rope = weight_bytes(spec).per_gpu_by_role_bytes["rope_cache"]  # a replicated buffer
    one = weight_bytes(spec, tp=1).per_gpu_bytes - rope
    two = weight_bytes(spec, tp=2).per_gpu_bytes - rope
    eight = weight_bytes(spec, tp=8).per_gpu_bytes - rope
    assert two == pytest.approx(one / 2, rel=0.002)  # norms are the only replicated part
    assert eight > one / 8  # 4 KV heads on 8 ranks: K and V projections are replicated


def test_fp8_block_checkpoint_is_about_half(catalog_model):
    bf16 = weight_bytes(catalog_model("Qwen/Qwen3-32B").spec).total_bytes
    fp8 = weight_bytes(catalog_model("Qwen/Qwen3-32B-FP8").spec).total_bytes
    # Embedding and LM head (2 x 151936 x 5120) stay bf16; everything else halves (+ scales)
    assert 0.5 < fp8 / bf16 < 0.55


def test_mtp_layers_not_loaded_by_default(catalog_model):
    spec = catalog_model("deepseek-ai/DeepSeek-V3").spec
    assert weight_bytes(spec, include_mtp=True).total_bytes > weight_bytes(spec).total_bytes


def test_pipeline_split_matches_vllm():
    # vLLM get_pp_indices: remainder layers go to the stages before the last
    assert [len(r) for r in pipeline_layer_split(32, 3)] == [11, 11, 10]
    assert [len(r) for r in pipeline_layer_split(61, 4)] == [15, 15, 16, 15]
    assert pipeline_layer_split(8, 1) == (range(0, 8),)


def test_gpt_oss_weights_close_to_checkpoint(catalog_model):
    # OpenAI's gpt-oss model card: the 120b checkpoint is 60.8 GiB (MXFP4 MoE weights).
    total = weight_bytes(catalog_model("openai/gpt-oss-120b").spec).total_bytes
    assert total / GIB_BYTES == pytest.approx(60.8, rel=0.02)


def test_rope_table_is_part_of_what_vllm_loads(catalog_model):
    """vLLM precomputes a cos/sin table of max_position_embeddings x rotary dims in the model
    dtype on every GPU. Llama-3.1-8B: 131,072 x 128 x 2 B = 32 MiB, which is why vLLM logs
    "Model loading took 14.99 GiB" for 8,030,261,248 bf16 parameters (14.96 GiB). Llama 4
    Scout's 10,485,760 positions make it 2.5 GiB per GPU."""
    from servefit.units import GIB_BYTES

    llama = catalog_model("meta-llama/Llama-3.1-8B").spec
    per_gpu = weight_bytes(llama).per_gpu_bytes
    assert per_gpu == 8_030_261_248 * 2 + 131_072 * 128 * 2
    assert round(per_gpu / GIB_BYTES, 2) == 14.99
    scout = catalog_model("meta-llama/Llama-4-Scout-17B-16E-Instruct").spec
    assert weight_bytes(scout, tp=4).per_gpu_by_role_bytes["rope_cache"] == 10_485_760 * 128 * 2
    jamba = catalog_model("ai21labs/AI21-Jamba-1.5-Mini").spec
    assert "rope_cache" not in weight_bytes(jamba).per_gpu_by_role_bytes  # no RoPE in Jamba


def test_kv_heads_replicate_when_ranks_outnumber_them(catalog_model):
    """Llama-3.1-8B at TP 16 (vLLM starts it: 32 heads / 16, 16 a multiple of the 8 KV heads,
    tp_rules), worked by hand: each rank holds 2 query heads and, since 16 ranks > 8 KV
    heads, one whole KV head (replicated twice, layers/linear.py QKVParallelLinear), not half
    of one. Per rank and layer: q 2 x 128 x 4096 = 1,048,576, k and v 128 x 4096 = 524,288
    each, o 4096 x 256 = 1,048,576: 3,145,728 parameters x 32 layers x 2 bytes."""
    spec = catalog_model("meta-llama/Llama-3.1-8B").spec
    attention = weight_bytes(spec, tp=16).per_gpu_by_role_bytes["attention"]
    assert attention == 3_145_728 * 32 * 2 == 201_326_592
    # without the replication k and v would be 64 rows each: 2,621,440 x 32 x 2
    assert attention != 2_621_440 * 32 * 2
