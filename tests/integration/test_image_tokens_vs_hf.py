"""Image tokens against the Hugging Face processors themselves (issue 26): transformers'
image processors, run in the vLLM environment the suite installs (the same processors vLLM
runs), on blank images of four sizes each: a common one, a wide one, one over the pixel cap
and one under the floor. The models: Qwen2-VL and Qwen2.5-VL (patch 14), Qwen3-VL and
Qwen3.5 / 3.6 (patch 16, the same processor), Llama 4 (its tile canvas), Gemma 3 (its
896-pixel square) and LLaVA 1.5 (its 336-pixel CLIP square)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import vllm_server as helper

from servefit.adapters.model_source import load_model
from servefit.core.image_tokens import ImageTokenRule, image_rule

SIZES = ((640, 480), (1920, 1080), (8000, 6000), (100, 80))

# In the vLLM environment: each processor's output for each size. The Qwen processors are
# built with the pixel bounds servefit encodes (the checkpoints' preprocessor_config.json
# values, passed in); their grid
# (t, h, w) gives the tokens as h x w / merge^2. Gemma 3 and LLaVA report the square they
# resize to (their token counts are the processors' fixed expansions).
_SCRIPT = r"""
import json, sys
from PIL import Image
from transformers import Qwen2VLImageProcessor, Gemma3ImageProcessor, CLIPImageProcessor
sizes, qwen = json.loads(sys.argv[1]), json.loads(sys.argv[2])
out = {}
import importlib.machinery, types
# transformers' Llama 4 image processor imports torchvision's transforms at module level;
# the vLLM CPU environment has no torchvision, and the two functions called below
# (find_supported_resolutions, get_best_fit) never touch it: empty modules satisfy the import
for mod in ("torchvision", "torchvision.transforms", "torchvision.transforms.v2",
            "torchvision.transforms.v2.functional"):
    stub = types.ModuleType(mod)
    stub.__spec__ = importlib.machinery.ModuleSpec(mod, None)
    sys.modules.setdefault(mod, stub)
import torch
from transformers.image_utils import SizeDict
from transformers.models.llama4.image_processing_llama4 import (
    find_supported_resolutions, get_best_fit)
from transformers.models.llama4.processing_llama4 import Llama4Processor
for name, (patch, low, high) in qwen.items():
    p = Qwen2VLImageProcessor(patch_size=patch, merge_size=2, temporal_patch_size=2,
                              min_pixels=low, max_pixels=high)
    grids = [p(images=[Image.new("RGB", (w, h))], return_tensors="np")["image_grid_thw"][0]
             for w, h in sizes]
    out[name] = [int(g[1]) * int(g[2]) // 4 for g in grids]
g = Gemma3ImageProcessor(size={"height": 896, "width": 896})
c = CLIPImageProcessor(size={"shortest_edge": 336}, crop_size={"height": 336, "width": 336})
for name, proc in (("gemma3", g), ("llava", c)):
    out[name] = [list(proc(images=[Image.new("RGB", (w, h))], return_tensors="np")
                      ["pixel_values"].shape[-2:]) for w, h in sizes]
tile = SizeDict(height=336, width=336)
canvases = torch.tensor(find_supported_resolutions(max_num_chunks=16, patch_size=tile))
out["llama4"] = []
for w, h in sizes:
    best = get_best_fit((h, w), canvases, resize_to_max_canvas=False)
    rows, columns = int(best[0]) // 336, int(best[1]) // 336
    text = Llama4Processor._prompt_split_image(None, (rows, columns), 144)
    marks = ("<|patch|>", "<|tile_x_separator|>", "<|tile_y_separator|>", "<|image|>",
             "<|image_start|>", "<|image_end|>")
    out["llama4"].append([columns, rows, sum(text.count(m) for m in marks)])
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def hf_counts() -> dict:
    python = helper.require_vllm()
    qwen = {
        name: (r.patch_size, r.min_pixels, r.max_pixels)
        for name, r in (("qwen2_5_vl", QWEN25), ("qwen3_vl", _rule("Qwen/Qwen3-VL-8B-Instruct")))
    }
    done = subprocess.run(
        [str(python), "-c", _SCRIPT, json.dumps(SIZES), json.dumps(qwen)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _rule(model: str) -> ImageTokenRule:
    vision = load_model(model, allow_hub=False).spec.vision
    assert vision is not None and vision.image_rule is not None, model
    return vision.image_rule


QWEN25 = _rule("Qwen/Qwen2.5-VL-7B-Instruct")


@pytest.mark.integration
def test_qwen_vl_tokens_equal_the_processors_grid(hf_counts):
    qwen2 = image_rule(
        {"model_type": "qwen2_vl"}, {"patch_size": 14, "spatial_merge_size": 2}
    )  # Qwen2-VL: the same processor and bounds as Qwen2.5-VL
    qwen25 = QWEN25  # the catalog's Qwen2.5-VL-7B-Instruct
    qwen3 = _rule("Qwen/Qwen3-VL-8B-Instruct")
    assert qwen2 is not None and qwen25 is not None
    for rule in (qwen2, qwen25):
        assert [rule.tokens(w, h) for w, h in SIZES] == hf_counts["qwen2_5_vl"]
    assert [qwen3.tokens(w, h) for w, h in SIZES] == hf_counts["qwen3_vl"]
    for model in ("Qwen/Qwen3.6-27B", "Qwen/Qwen3.5-35B-A3B"):  # vLLM: the Qwen3-VL processor
        assert [_rule(model).tokens(w, h) for w, h in SIZES] == hf_counts["qwen3_vl"], model


@pytest.mark.integration
def test_llama4_tiles_and_tokens_equal_the_processors(hf_counts):
    # the processor's own canvas choice (get_best_fit over find_supported_resolutions, at
    # max_patches 16) and its prompt expansion (_prompt_split_image, 144 patches a tile)
    rule = _rule("meta-llama/Llama-4-Scout-17B-16E-Instruct")
    ours = [[*rule.canvas(w, h), rule.tokens(w, h)] for w, h in SIZES]
    assert ours == hf_counts["llama4"]


@pytest.mark.integration
def test_fixed_square_families_resize_as_their_processors_do(hf_counts):
    for model, family, tokens in (
        ("google/gemma-3-27b-it", "gemma3", 256),  # mm_tokens_per_image
        ("llava-hf/llava-1.5-7b-hf", "llava", 576),  # (336 / 14)^2, CLS dropped ("default")
    ):
        rule = _rule(model)
        for (w, h), square in zip(SIZES, hf_counts[family], strict=True):
            assert list(rule.resized(w, h)[::-1]) == square, (model, w, h)
            assert rule.tokens(w, h) == tokens
