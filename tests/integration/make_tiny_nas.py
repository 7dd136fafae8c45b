"""The tiny Nemotron-NAS (``DeciLMForCausalLM``) of ``make_tiny_model.py --arch nas``.

transformers has no DeciLM class (the published checkpoints ship their own configuration
code), so this writes the three files vLLM reads: ``config.json`` (``model_type``
``nemotron-nas``, an ``auto_map`` to the configuration module below, ``block_configs``),
``configuration_decilm.py`` (a Llama config whose ``block_configs`` entries answer
attribute access, as vLLM's ``nemotron_nas.py`` reads them: ``block.attention.no_op``) and
``model.safetensors`` (random seeded weights named as vLLM's DeciLM loads them). vLLM needs
``--trust-remote-code`` to import the configuration module. The published configs' null
``num_key_value_heads`` and ``intermediate_size`` are left out: transformers 5 types
LlamaConfig's fields and refuses a null there (vLLM reads neither: both are per block).

The 4 blocks, 4 query heads of 32 dims (hidden 128):

* 0: attention, ``n_heads_in_group`` 2 (2 KV heads), MLP ``ffn_mult`` 2.0 (-> 256 wide);
* 1: no attention (``no_op``), MLP ``ffn_mult`` 1.0 (-> 256: int(2 x 128 / 3) = 85 -> 256);
* 2: attention, ``n_heads_in_group`` 4 (1 KV head), MLP ``ffn_mult`` 2.0;
* 3: attention, ``n_heads_in_group`` 2 (2 KV heads), no MLP (``no_op``).

Three KV-cache layers of two page sizes (2 and 1 KV heads) and one block size: vLLM keeps
them in one group (``UniformTypeKVCacheSpecs``), a block costing the sum of the three pages.
"""

from __future__ import annotations

import json
from pathlib import Path

CONFIG_MODULE = '''"""A minimal DeciLM configuration for a test checkpoint: a Llama config whose
block_configs entries answer attribute access (block.attention.no_op)."""

from transformers import LlamaConfig


class _Block(dict):
    def __getattr__(self, name):
        try:
            value = self[name]
        except KeyError:
            raise AttributeError(name) from None
        return _Block(value) if isinstance(value, dict) else value


class DeciLMConfig(LlamaConfig):
    model_type = "nemotron-nas"

    def __init__(self, block_configs=None, **kwargs):
        self.block_configs = [_Block(b) for b in (block_configs or [])]
        super().__init__(**kwargs)
'''

NAS_BLOCKS = [
    {
        "attention": {"n_heads_in_group": 2, "no_op": False},
        "ffn": {"ffn_mult": 2.0, "no_op": False},
    },
    {
        "attention": {"n_heads_in_group": None, "no_op": True},
        "ffn": {"ffn_mult": 1.0, "no_op": False},
    },
    {
        "attention": {"n_heads_in_group": 4, "no_op": False},
        "ffn": {"ffn_mult": 2.0, "no_op": False},
    },
    {
        "attention": {"n_heads_in_group": 2, "no_op": False},
        "ffn": {"ffn_mult": None, "no_op": True},
    },
]


def _ffn_width(ffn_mult: float, hidden: int) -> int:
    size = int(2 * ffn_mult * hidden / 3)
    return size if size % 256 == 0 else size + 256 - size % 256


def build_nas(
    out_dir: Path, tokenizer, dtype: str, *, hidden: int, heads: int, max_pos: int, seed: int
) -> dict:
    import torch
    from safetensors.torch import save_file

    torch.manual_seed(seed)
    vocab = len(tokenizer)
    head_dim = hidden // heads
    tensors: dict[str, torch.Tensor] = {}

    def add(name: str, *shape: int) -> None:
        tensors[name] = (torch.randn(*shape) * 0.02).to(getattr(torch, dtype))

    add("model.embed_tokens.weight", vocab, hidden)
    for i, block in enumerate(NAS_BLOCKS):
        p = f"model.layers.{i}"
        if not block["attention"]["no_op"]:
            kv = heads // block["attention"]["n_heads_in_group"]
            add(f"{p}.self_attn.q_proj.weight", heads * head_dim, hidden)
            add(f"{p}.self_attn.k_proj.weight", kv * head_dim, hidden)
            add(f"{p}.self_attn.v_proj.weight", kv * head_dim, hidden)
            add(f"{p}.self_attn.o_proj.weight", hidden, heads * head_dim)
            tensors[f"{p}.input_layernorm.weight"] = torch.ones(hidden).to(getattr(torch, dtype))
        if not block["ffn"]["no_op"]:
            width = _ffn_width(block["ffn"]["ffn_mult"], hidden)
            add(f"{p}.mlp.gate_proj.weight", width, hidden)
            add(f"{p}.mlp.up_proj.weight", width, hidden)
            add(f"{p}.mlp.down_proj.weight", hidden, width)
            tensors[f"{p}.post_attention_layernorm.weight"] = torch.ones(hidden).to(
                getattr(torch, dtype)
            )
    tensors["model.norm.weight"] = torch.ones(hidden).to(getattr(torch, dtype))
    add("lm_head.weight", vocab, hidden)
    save_file(tensors, str(out_dir / "model.safetensors"), metadata={"format": "pt"})
    (out_dir / "configuration_decilm.py").write_text(CONFIG_MODULE)
    config = {
        "architectures": ["DeciLMForCausalLM"],
        "model_type": "nemotron-nas",
        "auto_map": {"AutoConfig": "configuration_decilm.DeciLMConfig"},
        "block_configs": NAS_BLOCKS,
        "hidden_size": hidden,
        "num_attention_heads": heads,
        "num_hidden_layers": len(NAS_BLOCKS),
        "hidden_act": "silu",
        "max_position_embeddings": max_pos,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "tie_word_embeddings": False,
        "attention_bias": False,
        "mlp_bias": False,
        "vocab_size": vocab,
        "torch_dtype": dtype,
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
    }
    (out_dir / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    return {
        "arch": "nas",
        "architectures": config["architectures"],
        "params": sum(t.numel() for t in tensors.values()),
        "vocab_size": vocab,
        "dtype": dtype,
    }
