"""Tensor-parallel validity per layer kind, as vLLM 0.32.0 enforces it at startup.

Each test names the vLLM source of its rule (file, function) and works an example from the
catalog; the rules themselves are in ``servefit.core.tp_rules``, step 2 of plan_capacity.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace

import pytest

from servefit.core.model_spec import MambaSpec, MoeSpec
from servefit.core.plan import ServeSettings, check_parallel_layout, plan_capacity
from servefit.core.tp_rules import tp_refusals, valid_tp_sizes
from servefit.errors import InvalidArgumentError

CLI = [sys.executable, "-m", "servefit.cli.main"]


def spec_of(catalog_model, model_id):
    return catalog_model(model_id).spec


def with_layers(spec, **changes):
    """The spec with every Mamba mixer / MoE block changed (a hypothetical variant)."""
    layers = []
    for layer in spec.layers:
        if isinstance(layer.mixer, MambaSpec) and "mixer" in changes:
            layer = replace(layer, mixer=replace(layer.mixer, **changes["mixer"]))
        if isinstance(layer.mlp, MoeSpec) and "mlp" in changes:
            layer = replace(layer, mlp=replace(layer.mlp, **changes["mlp"]))
        layers.append(layer)
    return replace(spec, layers=tuple(layers))


# --- the case: Qwen3.6-27B-FP8 on A40s -------------------------------------------


def test_qwen36_fp8_tp3_refused_with_every_reason_and_the_valid_sizes(catalog_model, gpu):
    """24 query heads divide by 3, but 4 KV heads neither divide by 3 nor does 3 divide by 4
    (linear.py QKVParallelLinear), the 16 Gated DeltaNet key heads do not divide by 3
    (qwen_gdn_linear_attn.py), nor 17,408 (the MLP) or the vocabulary padded to 248,320."""
    loaded = catalog_model("Qwen/Qwen3.6-27B-FP8")
    with pytest.raises(InvalidArgumentError) as caught:
        plan_capacity(loaded.spec, gpu("A40"), ServeSettings(tensor_parallel_size=3))
    message = str(caught.value)
    assert message.startswith("--tensor-parallel-size 3: vLLM refuses to start Qwen/Qwen3.6")
    assert "neither divides the 4 KV heads" in message
    assert "16 linear-attention key heads do not divide by 3" in message
    assert "48 linear-attention value heads" not in message  # 48 = 3 x 16
    assert "heads (query heads)" not in message  # 24 = 3 x 8
    assert message.endswith("Valid sizes up to 16: 1, 2, 4, 8")


@pytest.mark.parametrize("tp", [2, 4, 8])
def test_qwen36_fp8_tp_2_4_8_start(catalog_model, gpu, tp):
    loaded = catalog_model("Qwen/Qwen3.6-27B-FP8")
    plan = plan_capacity(
        loaded.spec,
        gpu("A40"),
        ServeSettings(tensor_parallel_size=tp, max_model_len=32_768),
        mamba_ssm_dtype=loaded.mamba_ssm_dtype,
    )
    assert plan.settings.tensor_parallel_size == tp


def test_cli_exit_2_for_qwen36_tp3():
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "NO_COLOR": "1", "COLUMNS": "200"}
    result = subprocess.run(
        [*CLI, "plan", "Qwen/Qwen3.6-27B-FP8", "--gpu", "A40", "-tp", "3"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert "4 KV heads" in result.stderr + result.stdout


# --- attention: query heads, KV heads with replication --------------------------------------


def test_query_heads_divide(catalog_model):
    """config/model.py ModelConfig.verify_with_parallel_config: total attention heads must
    divide by TP. Llama-3.1-8B (32 heads) at TP 3 is refused."""
    assert any(
        "32 heads (query heads)" in r
        for r in tp_refusals(spec_of(catalog_model, "meta-llama/Llama-3.1-8B"), 3)
    )


def test_kv_heads_replicate_when_tp_is_a_multiple(catalog_model):
    """layers/linear.py QKVParallelLinear.__init__: tp >= KV heads replicates each head
    divide(tp, kv) times, else divide(kv, tp). Llama-3.1-8B (8 KV heads) starts at TP 16
    (each KV head on two ranks); phi-4 (40 query, 10 KV heads) is refused at TP 4 (10 % 4)
    and at TP 8 (8 < 10, 10 % 8), starts at TP 2."""
    llama = spec_of(catalog_model, "meta-llama/Llama-3.1-8B")
    assert tp_refusals(llama, 16) == ()
    phi4 = spec_of(catalog_model, "microsoft/phi-4")
    assert tp_refusals(phi4, 4) == (
        "4 neither divides the 10 KV heads nor is a multiple of them (vLLM replicates KV heads "
        "only when TP is a multiple of their number)",
    )
    assert valid_tp_sizes(phi4) == (1, 2)


# --- MLA ---------------------------------------------------------------------------------


def test_mla_heads_divide(catalog_model):
    """models/deepseek_v2.py DeepseekV2MLAAttention: assert num_heads % tp_size == 0; the
    latent KV is not split. GLM-4.7-Flash (20 MLA heads): TP 4 starts, TP 8 is refused."""
    glm = spec_of(catalog_model, "zai-org/GLM-4.7-Flash")
    assert tp_refusals(glm, 4) == ()
    assert "8 does not divide the model's 20 heads (MLA heads)" in tp_refusals(glm, 8)
    assert valid_tp_sizes(glm) == (1, 2, 4)


# --- linear attention (Gated DeltaNet) ------------------------------------------------------


def test_linear_attention_key_and_value_heads_divide(catalog_model):
    """layers/mamba/gdn/qwen_gdn_linear_attn.py QwenGatedDeltaNetAttention: A_log is
    divide(num_v_heads, tp) and the merged in_proj asserts key_dim and value_dim % tp; no
    replication. Qwen3-Next-80B (16 key, 32 value heads) at TP 32: key heads refused (16 <
    32), value heads split one per rank."""
    nxt = spec_of(catalog_model, "Qwen/Qwen3-Next-80B-A3B-Thinking")
    reasons = tp_refusals(nxt, 32)
    assert "16 linear-attention key heads do not divide by 32" in reasons
    assert not any("value heads" in r for r in reasons)
    assert "32 linear-attention value heads do not divide by 3" in tp_refusals(nxt, 3)


# --- Mamba ---------------------------------------------------------------------------------


def test_mamba2_heads_and_groups(catalog_model):
    """layers/mamba/mamba_mixer2.py MambaMixer2.__init__: num_heads % tp == 0, and
    n_groups % tp == 0 or n_groups == 1 (the single group replicated to every rank,
    mamba_utils.py extra_groups_for_head_shards). Nemotron-H-56B (256 heads, 8 groups):
    TP 8 starts; TP 16 is refused on the groups alone; with one group it would start."""
    nemotron = spec_of(catalog_model, "nvidia/Nemotron-H-56B-Base-8K")
    assert tp_refusals(nemotron, 8) == ()
    assert tp_refusals(nemotron, 16) == (
        "8 Mamba groups do not divide by 16 (only a single group is replicated)",
    )
    one_group = with_layers(nemotron, mixer={"n_groups": 1})
    assert tp_refusals(one_group, 16) == ()
    assert "256 Mamba heads do not divide by 3" in tp_refusals(nemotron, 3)


def test_mamba1_intermediate_divides(catalog_model):
    """layers/mamba/mamba_mixer.py MambaMixer: ColumnParallelLinear(intermediate_size).
    Jamba-1.5-Mini (d_inner 8192) at TP 3 is refused."""
    jamba = spec_of(catalog_model, "ai21labs/AI21-Jamba-1.5-Mini")
    assert "Mamba intermediate size 8192 does not divide by 3" in tp_refusals(jamba, 3)


# --- MLPs and experts --------------------------------------------------------------------


def test_dense_and_expert_intermediate_divide(catalog_model):
    """layers/linear.py MergedColumnParallelLinear (assert output_size % tp == 0) for dense
    MLPs; fused_moe/config.py FusedMoEConfig.__post_init__ (assert intermediate_size % tp
    == 0) for experts. Mixtral-8x22B (48 query heads, 3 divides them) at TP 3: refused on
    its 8 KV heads, its 16,384-wide experts and its 32,000 vocabulary."""
    mixtral = spec_of(catalog_model, "mistralai/Mixtral-8x22B-v0.1")
    reasons = tp_refusals(mixtral, 3)
    assert "expert intermediate size 16384 does not divide by 3" in reasons
    assert not any("query heads" in r for r in reasons)
    assert "MLP intermediate size 8960 does not divide by 3" in tp_refusals(
        spec_of(catalog_model, "Qwen/Qwen2.5-1.5B"), 3
    )


def test_expert_parallel_lifts_the_expert_split_not_the_shared_expert(catalog_model):
    """fused_moe/config.py FusedMoEParallelConfig.make: with --enable-expert-parallel the
    experts' TP is 1; expert_map_manager.py determine_expert_map spreads any number of
    experts (the remainder to the first ranks). The shared expert is a dense MLP, still
    split. config/model.py _verify_with_expert_parallelism refuses EP on a dense model."""
    coder = spec_of(catalog_model, "Qwen/Qwen3-Coder-480B-A35B-Instruct")  # experts 2560 wide
    assert any("expert intermediate size 2560" in r for r in tp_refusals(coder, 3))
    assert not any("expert intermediate" in r for r in tp_refusals(coder, 3, ep=True))
    nxt = spec_of(catalog_model, "Qwen/Qwen3-Next-80B-A3B-Thinking")
    assert "shared-expert intermediate size 512 does not divide by 3" in tp_refusals(
        nxt, 3, ep=True
    )
    llama = spec_of(catalog_model, "meta-llama/Llama-3.1-8B")
    assert "expert parallelism needs a mixture-of-experts model" in tp_refusals(llama, 2, ep=True)
    with pytest.raises(InvalidArgumentError, match="mixture-of-experts"):
        check_parallel_layout(llama, 2, 1, ep=True)


def test_qwen3_moe_tp_at_most_the_experts(catalog_model):
    """models/qwen3_moe.py Qwen3MoeSparseMoeBlock (and qwen3_next.py): "Tensor parallel
    size is greater than the number of experts". A hypothetical 4-expert Qwen3-30B-A3B at
    TP 8 is refused; the real 128 experts start."""
    qwen = spec_of(catalog_model, "Qwen/Qwen3-30B-A3B")
    assert tp_refusals(qwen, 8) == ()
    few = with_layers(qwen, mlp={"num_experts": 4, "num_experts_per_token": 2})
    assert "TP 8 exceeds the 4 experts" in tp_refusals(few, 8)


# --- fp8 block quantization --------------------------------------------------------------


def test_fp8_moe_block_refined_then_refused(catalog_model):
    """quantization/fp8.py Fp8MoEMethod.create_weights -> utils/fp8_utils.py
    validate_fp8_block_shape_moe, unless fused_moe/oracle/fp8.py refine_fp8_moe_block_shape
    finds gcd(128, 128, slice, hidden) >= 32. Qwen3-30B-A3B-FP8 (experts 768 wide, hidden
    2048): TP 4 -> 192, refined to 64, starts; TP 8 -> 96, refined to 32; TP 16 -> 48,
    gcd 16, refused; with expert parallelism the experts are not split and TP 16 starts."""
    fp8 = spec_of(catalog_model, "Qwen/Qwen3-30B-A3B-FP8")
    assert tp_refusals(fp8, 4) == ()
    assert tp_refusals(fp8, 8) == ()
    (reason,) = tp_refusals(fp8, 16)
    assert "(768 / 16 = 48) is not a multiple of the 128x128 weight block" in reason
    assert tp_refusals(fp8, 16, ep=True) == ()
    assert tp_refusals(spec_of(catalog_model, "Qwen/Qwen3-30B-A3B"), 16) == ()  # bf16


def test_fp8_moe_block_without_refinement_outside_the_fp8_method(catalog_model):
    """compressed_tensors_moe_w8a8_fp8.py calls validate_fp8_block_shape_moe without the
    refinement: the same experts in a compressed-tensors checkpoint are refused at TP 4
    (192 is not a multiple of 128)."""
    fp8 = spec_of(catalog_model, "Qwen/Qwen3-30B-A3B-FP8")
    ct = replace(fp8, quant=replace(fp8.quant, method="compressed-tensors"))
    assert any("(768 / 4 = 192)" in r for r in tp_refusals(ct, 4))


def test_fp8_row_parallel_slice_is_a_multiple_of_the_block(catalog_model):
    """utils/fp8_utils.py validate_fp8_block_shape, "Required by row parallel":
    input_size_per_partition % block_k == 0. Qwen3-32B-FP8 (MLP 25,600) at TP 16: 1,600 is
    not a multiple of 128, refused, while the bf16 Qwen3-32B starts. DeepSeek-R1 at TP 32:
    its dense down_proj (18,432 -> 576) and shared expert (2,048 -> 64) are refused."""
    assert tp_refusals(spec_of(catalog_model, "Qwen/Qwen3-32B"), 16) == ()
    (reason,) = tp_refusals(spec_of(catalog_model, "Qwen/Qwen3-32B-FP8"), 16)
    assert reason == (
        "fp8 down_proj: the TP slice of its input (25600 / 16 = 1600) is not a multiple of "
        "the weight block 128"
    )
    r1 = tp_refusals(spec_of(catalog_model, "deepseek-ai/DeepSeek-R1"), 32)
    assert any("(18432 / 32 = 576)" in r for r in r1)
    assert any("(2048 / 32 = 64)" in r for r in r1)


# --- vocabulary ----------------------------------------------------------------------------


def test_vocab_padded_to_64_then_split(catalog_model):
    """layers/vocab_parallel_embedding.py VocabParallelEmbedding: pad_vocab_size(vocab, 64)
    then divide(num_embeddings_padded, tp). Qwen3's 151,936 (2,374 x 64) does not divide by
    3; Llama 3's 128,256 (= 3 x 42,752) does."""
    qwen = tp_refusals(spec_of(catalog_model, "Qwen/Qwen3-8B"), 3)
    assert "the vocabulary padded to 151,936 does not divide by 3" in qwen
    llama = tp_refusals(spec_of(catalog_model, "meta-llama/Llama-3.1-8B"), 3)
    assert not any("vocabulary" in r for r in llama)


def test_recommendation_search_still_skips_invalid_sizes(catalog_model, gpu):
    """The suggestions try larger TP sizes and skip the refused ones (InvalidArgumentError)."""
    loaded = catalog_model("Qwen/Qwen3.6-27B-FP8")
    plan = plan_capacity(
        loaded.spec,
        gpu("A40"),
        ServeSettings(max_model_len=131_072, concurrency=8),
        mamba_ssm_dtype=loaded.mamba_ssm_dtype,
    )
    assert not any("--tensor-parallel-size 3" in p for p in plan.problems)
