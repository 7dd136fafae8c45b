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
    one = weight_bytes(spec, tp=1).per_gpu_bytes
    two = weight_bytes(spec, tp=2).per_gpu_bytes
    eight = weight_bytes(spec, tp=8).per_gpu_bytes
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
