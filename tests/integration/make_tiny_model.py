"""Build a tiny Llama-style checkpoint with random weights, for a real vLLM (CPU) server.

Nothing is downloaded: the tokenizer is a byte-level BPE trained here on deterministic text,
the weights are random (seeded), and both are written with Hugging Face's own writers
(``save_pretrained``), so vLLM loads the directory like any local model.

Runs with the vLLM virtual environment's interpreter (transformers, tokenizers and torch
are vLLM dependencies; servefit's own environment does not have them)::

    .venv-vllm/bin/python tests/integration/make_tiny_model.py OUT_DIR [--arch ARCH]

``--arch`` picks the architecture (same tokenizer, same width, bf16):

* ``llama`` (default): ``LlamaForCausalLM``, 2 layers, every layer full attention.
* ``moe``: ``Qwen3MoeForCausalLM`` (model_type ``qwen3_moe``), 2 sparse layers of 4 experts
  (top-2, 64-wide), q/k norms; the KV cache is the Llama's (4 query, 2 KV heads of 32 dims).
* ``sliding``: ``Gemma2ForCausalLM``, 4 layers alternating sliding (window 64) and full
  attention (``layer_types``), 4 query / 2 KV heads of 32 dims. vLLM keeps the two kinds in
  separate KV-cache groups, and a sliding layer needs only
  ``cdiv(min(window - 1 + max_num_batched_tokens, max_model_len), block) + 1`` blocks.
* ``hybrid``: ``Qwen3NextForCausalLM`` (model_type ``qwen3_next``), 4 layers: 3 Gated
  DeltaNet (linear attention: 2 key / 4 value heads of 64 dims, conv kernel 4) and 1 gated
  full attention (4 query / 2 KV heads of 32 dims), as ``full_attention_interval`` 4 lays
  them out; every layer's MLP is a 4-expert MoE (top-2, 64-wide) with a 64-wide shared
  expert. One state page is (4 - 1) x (2 x 128 + 256) conv x 2 bytes + 4 x 64 x 64 ssm x
  2 bytes = 35,840 bytes, more than one 128-token attention page (128 x 2 x 2 x 32 x 2 =
  32,768 bytes): vLLM raises the attention block so one attention page holds a state page,
  in steps of the block in force (256 on the CPU backend's 128, 160 with ``--block-size 32``,
  192 with 64). Qwen3.5 (``qwen3_5_text``) would do as well, but vLLM 0.32's Qwen3.5 module
  imports its vision tower, which needs torchvision: the CPU environment has none.
* ``mamba2``: ``Mamba2ForCausalLM`` (model_type ``mamba2``), 2 Mamba-2 layers, no attention
  (4 heads of 64 dims, 1 group, state 64, conv kernel 4). One state page is (4 - 1) x (256 +
  2 x 64) conv x 2 bytes + 4 x 64 x 64 ssm x 2 bytes = 35,072 bytes; vLLM's CPU build runs
  Mamba-2 (its CPU SSU backend), not Mamba-1 (no CPU ``selective_scan_fwd``). Mamba configs
  carry no maximum length: ``max_position_embeddings`` 4096 is written so the server and the
  plan take the same one.
* ``falcon_h1``: ``FalconH1ForCausalLM``, 2 layers, each attention (4 query / 2 KV heads of 32
  dims) and Mamba-2 (the ``mamba2`` arch's shape, no gated-norm weight) side by side, then a
  256-wide gated MLP. vLLM registers 2 attention + 2 Mamba cache layers; the 35,072-byte state
  page raises the CPU's 128-token block to 256.
* ``nas``: ``DeciLMForCausalLM`` (Nemotron-NAS, ``make_tiny_nas.py``): 4 blocks of unequal
  attention (2, none, 1 and 2 KV heads) and MLP widths (``block_configs``); served with
  ``--trust-remote-code`` (its configuration module ships in the directory).
* ``granite_hybrid``: ``GraniteMoeHybridForCausalLM`` (Granite-4.0-H), 4 layers per
  ``layer_types``: 3 Mamba-2 (the ``mamba2`` arch's shape) and 1 attention (4 query / 2 KV
  heads of 32 dims, no positional encoding); every layer's MLP a 4-expert MoE (top-2,
  64-wide) plus a 64-wide shared MLP; tied embeddings.
* ``gemma4``: ``Gemma4ForCausalLM`` (model_type ``gemma4_text``), 5 layers per
  ``layer_types`` (sliding, sliding, full, sliding, full; window 64): sliding layers have 2 KV
  heads of 32 dims, full layers 1 KV head of 128 (``global_head_dim``,
  ``num_global_key_value_heads``) with K = V (``attention_k_eq_v``: no v_proj); the last 2
  layers (``num_kv_shared_layers``) keep no cache of their own (they read layers 1 and 2's)
  and have a double-wide MLP (``use_double_wide_mlp``); per-layer input embeddings of 16
  dims a layer (``hidden_size_per_layer_input``) over the whole vocabulary; tied embeddings.

The checkpoint is bfloat16 (``--dtype float32`` writes a float32 one). vLLM's CPU backend
runs bf16, fp16 and fp32 (head size 32 is supported), bf16 included on AVX2-only hosts. Do not
make the default float32: with ``--dtype auto`` vLLM *downcasts* a float32 checkpoint to the
platform's preferred dtype (``vllm/config/model.py`` ``_resolve_auto_dtype``: "Downcasting
torch.float32 to torch.bfloat16"), so the KV cache would be bf16 while config.json says
float32. With a bf16 checkpoint the config's dtype is the dtype the engine really uses.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

# The architecture (kept small: ~0.56 M parameters, ~1 MB on disk in bf16).
HIDDEN_SIZE = 128
INTERMEDIATE_SIZE = 256
NUM_LAYERS = 2
NUM_HEADS = 4  # head_dim 32
NUM_KV_HEADS = 2
MAX_POSITION_EMBEDDINGS = 4096
VOCAB_TARGET = 1024  # BPE training target; the model's vocab_size is the trained size
DTYPE = "bfloat16"
SEED = 0

BOS, EOS, PAD = "<s>", "</s>", "<pad>"
SPECIAL_TOKENS = [PAD, BOS, EOS]  # ids 0, 1, 2
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "<|{{ message['role'] }}|>\n{{ message['content'] }}{{ eos_token }}\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)

_WORDS_TEXT = (
    "the quick brown fox jumps over lazy dog a an and or but if then else when while for "
    "to of in on at by with from into over under between after before during since until "
    "model server token request memory cache block layer head batch prefix length context "
    "capacity plan engine fit serve tensor weight kernel attention query key value page "
    "is are was were be been has have had do does did can could will would should may might "
    "one two three four five six seven eight nine ten hundred thousand million first last "
    "red green blue yellow black white small large long short fast slow new old good bad "
    "time day night year week hour minute second people world house water light sound "
    "hello please thank you yes no maybe always never often sometimes today tomorrow"
)
WORDS = _WORDS_TEXT.split()


def corpus(num_lines: int = 4000, seed: int = SEED) -> list[str]:
    """Deterministic English-like lines: words, capitalised words, numbers, punctuation."""
    rng = random.Random(seed)
    lines = []
    for _ in range(num_lines):
        parts = []
        for _ in range(rng.randint(6, 24)):
            r = rng.random()
            if r < 0.08:
                parts.append(str(rng.randint(0, 99999)))
            elif r < 0.16:
                parts.append(rng.choice(WORDS).capitalize())
            else:
                parts.append(rng.choice(WORDS))
        lines.append(" ".join(parts) + rng.choice([".", "!", "?", ",", ";", ":"]))
    return lines


def build_tokenizer(out_dir: Path):
    """Train a byte-level BPE and save it as a transformers fast tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_TARGET,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(), trainer=trainer)
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A",
        pair=f"{BOS} $A {BOS} $B",
        special_tokens=[(BOS, tok.token_to_id(BOS))],
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        model_max_length=MAX_POSITION_EMBEDDINGS,
        clean_up_tokenization_spaces=False,
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(str(out_dir))
    return fast


# --arch moe (Qwen3-MoE): experts and their width; attention as the Llama's
MOE_NUM_EXPERTS = 4
MOE_EXPERTS_PER_TOKEN = 2
MOE_INTERMEDIATE_SIZE = 64
# --arch sliding (Gemma 2): layers alternate sliding / full; the window is far below 4096
SLIDING_NUM_LAYERS = 4
SLIDING_WINDOW = 64
# --arch hybrid (Qwen3-Next): Gated DeltaNet layers, one full-attention layer in four
HYBRID_NUM_LAYERS = 4
HYBRID_FULL_ATTENTION_INTERVAL = 4
HYBRID_LINEAR_KEY_HEADS = 2
HYBRID_LINEAR_VALUE_HEADS = 4
HYBRID_LINEAR_HEAD_DIM = 64  # key and value heads
HYBRID_CONV_KERNEL = 4
# --arch mamba2 (pure Mamba-2): heads x head_dim = 2 x HIDDEN_SIZE
MAMBA2_NUM_HEADS = 4
MAMBA2_HEAD_DIM = 64
MAMBA2_STATE_SIZE = 64
# --arch gemma4: both layer kinds, KV sharing, K = V on full layers, per-layer inputs
GEMMA4_LAYER_TYPES = [
    "sliding_attention",
    "sliding_attention",
    "full_attention",
    "sliding_attention",
    "full_attention",
]
GEMMA4_KV_SHARED_LAYERS = 2
GEMMA4_GLOBAL_HEAD_DIM = 128
GEMMA4_GLOBAL_KV_HEADS = 1
GEMMA4_PER_LAYER_INPUT = 16
ARCHS = (
    "llama",
    "moe",
    "sliding",
    "hybrid",
    "mamba2",
    "falcon_h1",
    "granite_hybrid",
    "nas",
    "gemma4",
)


def _special_ids(tokenizer) -> dict:
    return {
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
    }


def _moe_model(tokenizer, dtype: str):
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    config = Qwen3MoeConfig(
        vocab_size=len(tokenizer),
        hidden_size=HIDDEN_SIZE,
        intermediate_size=INTERMEDIATE_SIZE,
        moe_intermediate_size=MOE_INTERMEDIATE_SIZE,
        num_experts=MOE_NUM_EXPERTS,
        num_experts_per_tok=MOE_EXPERTS_PER_TOKEN,
        norm_topk_prob=True,
        decoder_sparse_step=1,
        mlp_only_layers=[],
        num_hidden_layers=NUM_LAYERS,
        num_attention_heads=NUM_HEADS,
        num_key_value_heads=NUM_KV_HEADS,
        head_dim=HIDDEN_SIZE // NUM_HEADS,
        max_position_embeddings=MAX_POSITION_EMBEDDINGS,
        rms_norm_eps=1e-6,
        rope_theta=10000.0,
        use_sliding_window=False,
        tie_word_embeddings=False,
        torch_dtype=dtype,
        **_special_ids(tokenizer),
    )
    return Qwen3MoeForCausalLM(config)


def _sliding_model(tokenizer, dtype: str):
    from transformers import Gemma2Config, Gemma2ForCausalLM

    head_dim = HIDDEN_SIZE // NUM_HEADS
    config = Gemma2Config(
        vocab_size=len(tokenizer),
        hidden_size=HIDDEN_SIZE,
        intermediate_size=INTERMEDIATE_SIZE,
        num_hidden_layers=SLIDING_NUM_LAYERS,
        num_attention_heads=NUM_HEADS,
        num_key_value_heads=NUM_KV_HEADS,
        head_dim=head_dim,
        query_pre_attn_scalar=head_dim,
        sliding_window=SLIDING_WINDOW,
        # even layers local, odd layers global: transformers' Gemma 2 default pattern
        layer_types=[
            "sliding_attention" if i % 2 == 0 else "full_attention"
            for i in range(SLIDING_NUM_LAYERS)
        ],
        max_position_embeddings=MAX_POSITION_EMBEDDINGS,
        rms_norm_eps=1e-6,
        rope_theta=10000.0,
        tie_word_embeddings=True,
        torch_dtype=dtype,
        **_special_ids(tokenizer),
    )
    return Gemma2ForCausalLM(config)


def _hybrid_model(tokenizer, dtype: str):
    from transformers import Qwen3NextConfig, Qwen3NextForCausalLM

    config = Qwen3NextConfig(
        vocab_size=len(tokenizer),
        hidden_size=HIDDEN_SIZE,
        intermediate_size=INTERMEDIATE_SIZE,
        num_hidden_layers=HYBRID_NUM_LAYERS,
        num_attention_heads=NUM_HEADS,
        num_key_value_heads=NUM_KV_HEADS,
        head_dim=HIDDEN_SIZE // NUM_HEADS,
        layer_types=[
            "full_attention"
            if (i + 1) % HYBRID_FULL_ATTENTION_INTERVAL == 0
            else "linear_attention"
            for i in range(HYBRID_NUM_LAYERS)
        ],
        linear_conv_kernel_dim=HYBRID_CONV_KERNEL,
        linear_key_head_dim=HYBRID_LINEAR_HEAD_DIM,
        linear_value_head_dim=HYBRID_LINEAR_HEAD_DIM,
        linear_num_key_heads=HYBRID_LINEAR_KEY_HEADS,
        linear_num_value_heads=HYBRID_LINEAR_VALUE_HEADS,
        num_experts=MOE_NUM_EXPERTS,
        num_experts_per_tok=MOE_EXPERTS_PER_TOKEN,
        moe_intermediate_size=MOE_INTERMEDIATE_SIZE,
        shared_expert_intermediate_size=MOE_INTERMEDIATE_SIZE,
        decoder_sparse_step=1,
        mlp_only_layers=[],
        norm_topk_prob=True,
        max_position_embeddings=MAX_POSITION_EMBEDDINGS,
        rms_norm_eps=1e-6,
        tie_word_embeddings=False,
        **_special_ids(tokenizer),
    )
    return Qwen3NextForCausalLM(config)


def _mamba2_model(tokenizer, dtype: str):
    from transformers import Mamba2Config, Mamba2ForCausalLM

    config = Mamba2Config(
        vocab_size=len(tokenizer),
        hidden_size=HIDDEN_SIZE,
        num_hidden_layers=NUM_LAYERS,
        num_heads=MAMBA2_NUM_HEADS,
        head_dim=MAMBA2_HEAD_DIM,
        expand=2,
        n_groups=1,
        state_size=MAMBA2_STATE_SIZE,
        conv_kernel=HYBRID_CONV_KERNEL,
        chunk_size=64,
        tie_word_embeddings=False,
        **_special_ids(tokenizer),
    )
    return Mamba2ForCausalLM(config)


def _falcon_h1_model(tokenizer, dtype: str):
    from transformers import FalconH1Config, FalconH1ForCausalLM

    config = FalconH1Config(
        vocab_size=len(tokenizer),
        hidden_size=HIDDEN_SIZE,
        intermediate_size=INTERMEDIATE_SIZE,
        num_hidden_layers=NUM_LAYERS,
        num_attention_heads=NUM_HEADS,
        num_key_value_heads=NUM_KV_HEADS,
        head_dim=HIDDEN_SIZE // NUM_HEADS,
        max_position_embeddings=MAX_POSITION_EMBEDDINGS,
        mamba_d_ssm=MAMBA2_NUM_HEADS * MAMBA2_HEAD_DIM,
        mamba_n_heads=MAMBA2_NUM_HEADS,
        mamba_d_head=MAMBA2_HEAD_DIM,
        mamba_d_state=MAMBA2_STATE_SIZE,
        mamba_n_groups=1,
        mamba_d_conv=HYBRID_CONV_KERNEL,
        mamba_chunk_size=64,
        tie_word_embeddings=False,
        **_special_ids(tokenizer),
    )
    return FalconH1ForCausalLM(config)


def _granite_hybrid_model(tokenizer, dtype: str):
    from transformers import GraniteMoeHybridConfig, GraniteMoeHybridForCausalLM

    config = GraniteMoeHybridConfig(
        vocab_size=len(tokenizer),
        hidden_size=HIDDEN_SIZE,
        intermediate_size=MOE_INTERMEDIATE_SIZE,
        shared_intermediate_size=MOE_INTERMEDIATE_SIZE,
        num_local_experts=MOE_NUM_EXPERTS,
        num_experts_per_tok=MOE_EXPERTS_PER_TOKEN,
        num_hidden_layers=HYBRID_NUM_LAYERS,
        layer_types=["mamba"] * (HYBRID_NUM_LAYERS - 1) + ["attention"],
        num_attention_heads=NUM_HEADS,
        num_key_value_heads=NUM_KV_HEADS,
        max_position_embeddings=MAX_POSITION_EMBEDDINGS,
        mamba_n_heads=MAMBA2_NUM_HEADS,
        mamba_d_head=MAMBA2_HEAD_DIM,
        mamba_d_state=MAMBA2_STATE_SIZE,
        mamba_n_groups=1,
        mamba_d_conv=HYBRID_CONV_KERNEL,
        mamba_expand=2,
        mamba_chunk_size=64,
        position_embedding_type="nope",
        tie_word_embeddings=True,
        **_special_ids(tokenizer),
    )
    return GraniteMoeHybridForCausalLM(config)


def _gemma4_model(tokenizer, dtype: str):
    from transformers import Gemma4ForCausalLM, Gemma4TextConfig

    config = Gemma4TextConfig(
        vocab_size=len(tokenizer),
        vocab_size_per_layer_input=len(tokenizer),
        hidden_size_per_layer_input=GEMMA4_PER_LAYER_INPUT,
        hidden_size=HIDDEN_SIZE,
        intermediate_size=INTERMEDIATE_SIZE,
        num_hidden_layers=len(GEMMA4_LAYER_TYPES),
        layer_types=GEMMA4_LAYER_TYPES,
        num_attention_heads=NUM_HEADS,
        num_key_value_heads=NUM_KV_HEADS,
        head_dim=HIDDEN_SIZE // NUM_HEADS,
        global_head_dim=GEMMA4_GLOBAL_HEAD_DIM,
        num_global_key_value_heads=GEMMA4_GLOBAL_KV_HEADS,
        attention_k_eq_v=True,
        num_kv_shared_layers=GEMMA4_KV_SHARED_LAYERS,
        use_double_wide_mlp=True,
        sliding_window=SLIDING_WINDOW,
        max_position_embeddings=MAX_POSITION_EMBEDDINGS,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
        **_special_ids(tokenizer),
    )
    return Gemma4ForCausalLM(config)


def build_model(out_dir: Path, tokenizer, dtype: str = DTYPE, arch: str = "llama") -> dict:
    if arch != "llama":
        return _build_other_model(out_dir, tokenizer, dtype, arch)
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(SEED)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=HIDDEN_SIZE,
        intermediate_size=INTERMEDIATE_SIZE,
        num_hidden_layers=NUM_LAYERS,
        num_attention_heads=NUM_HEADS,
        num_key_value_heads=NUM_KV_HEADS,
        max_position_embeddings=MAX_POSITION_EMBEDDINGS,
        rms_norm_eps=1e-6,
        rope_theta=10000.0,
        tie_word_embeddings=False,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        torch_dtype=dtype,
    )
    model = LlamaForCausalLM(config).to(getattr(torch, dtype))
    model.save_pretrained(str(out_dir), safe_serialization=True)
    # Some transformers releases write "dtype" instead of "torch_dtype"; servefit and older
    # vLLM read "torch_dtype", so make sure both are present.
    config_path = out_dir / "config.json"
    data = json.loads(config_path.read_text())
    data.setdefault("torch_dtype", dtype)
    data.setdefault("dtype", dtype)
    config_path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    return {
        "params": sum(p.numel() for p in model.parameters()),
        "vocab_size": len(tokenizer),
        "dtype": dtype,
    }


def _build_other_model(out_dir: Path, tokenizer, dtype: str, arch: str) -> dict:
    import torch

    if arch == "nas":  # no transformers class: written tensor by tensor (make_tiny_nas.py)
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from make_tiny_nas import build_nas

        return build_nas(
            out_dir,
            tokenizer,
            dtype,
            hidden=HIDDEN_SIZE,
            heads=NUM_HEADS,
            max_pos=MAX_POSITION_EMBEDDINGS,
            seed=SEED,
        )

    makers = {
        "moe": _moe_model,
        "sliding": _sliding_model,
        "hybrid": _hybrid_model,
        "mamba2": _mamba2_model,
        "falcon_h1": _falcon_h1_model,
        "granite_hybrid": _granite_hybrid_model,
        "gemma4": _gemma4_model,
    }
    if arch not in makers:
        raise ValueError(f"unknown arch {arch!r}; choose from {', '.join(ARCHS)}")
    torch.manual_seed(SEED)
    model = makers[arch](tokenizer, dtype).to(getattr(torch, dtype))
    model.save_pretrained(str(out_dir), safe_serialization=True)
    config_path = out_dir / "config.json"
    data = json.loads(config_path.read_text())
    data.setdefault("torch_dtype", dtype)
    data.setdefault("dtype", dtype)
    if arch == "moe" and "num_local_experts" in data:
        # transformers 5.x saves Qwen3-MoE's expert count under its attribute_map alias
        # "num_local_experts"; the published Qwen3-MoE checkpoints (and transformers 4.x)
        # spell it "num_experts". Write the published spelling: transformers and vLLM read
        # both, servefit only the published one.
        data["num_experts"] = data.pop("num_local_experts")
    if arch == "hybrid":
        # the published Qwen3-Next configs spell the layout both ways; servefit and vLLM
        # read layer_types, and full_attention_interval documents it
        data["full_attention_interval"] = HYBRID_FULL_ATTENTION_INTERVAL
    if arch == "mamba2":
        data["max_position_embeddings"] = MAX_POSITION_EMBEDDINGS  # Mamba configs have none
    config_path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    return {
        "arch": arch,
        "architectures": data.get("architectures"),
        "params": sum(p.numel() for p in model.parameters()),
        "vocab_size": len(tokenizer),
        "dtype": dtype,
    }


def build(out_dir: Path, dtype: str = DTYPE, arch: str = "llama") -> dict:
    out_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    tokenizer = build_tokenizer(out_dir)
    info = build_model(out_dir, tokenizer, dtype, arch)
    info["seconds"] = round(time.monotonic() - t0, 2)
    info["dir"] = str(out_dir)
    # Written last: its presence marks a complete build (the helper caches on it).
    (out_dir / "BUILD_INFO.json").write_text(json.dumps(info, indent=2) + "\n")
    return info


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--dtype", default=DTYPE, choices=["bfloat16", "float16", "float32"])
    parser.add_argument("--arch", default="llama", choices=ARCHS)
    args = parser.parse_args(argv)
    info = build(args.out_dir, args.dtype, args.arch)
    print(json.dumps(info))
    return 0


if __name__ == "__main__":
    sys.exit(main())
