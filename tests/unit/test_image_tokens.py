"""Image tokens as the models' processors count them (issue 26), written out by hand from
the rules in servefit.core.image_tokens (transformers' smart_resize for the Qwen-VL family,
fixed squares for Gemma 3 and LLaVA 1.5). tests/integration/test_image_tokens_vs_hf.py runs
the Hugging Face processors themselves on the same sizes."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from servefit.cli.main import cli
from servefit.core.image_tokens import ImageTokenRule
from servefit.errors import InvalidArgumentError

QWEN25 = ImageTokenRule(
    family="qwen2_5_vl", patch_size=14, merge_size=2, min_pixels=3_136, max_pixels=12_845_056
)
QWEN3 = ImageTokenRule(
    family="qwen3_vl", patch_size=16, merge_size=2, min_pixels=65_536, max_pixels=16_777_216
)


def test_a_side_is_rounded_to_patch_times_merge_and_the_area_kept_in_bounds():
    # Qwen3-VL, 1920x1080: the factor is 16 x 2 = 32; 1080 / 32 = 33.75 -> 34 x 32 = 1088,
    # 1920 / 32 = 60 -> 1920; 2,088,960 pixels are inside the bounds; 120 x 68 patches of
    # 16, every 2 x 2 one token: 8,160 / 4 = 2,040
    assert QWEN3.resized(1920, 1080) == (1920, 1088)
    assert (QWEN3.patches(1920, 1080), QWEN3.tokens(1920, 1080)) == (8_160, 2_040)
    # Qwen2.5-VL, 8000x6000: rounded to 8008 x 5992 (47.98 M pixels) is over 12,845,056, so
    # scaled by sqrt(48e6 / 12,845,056) = 1.9331 and floored to the factor 28:
    # 6000 / 1.9331 / 28 = 110.85 -> 110 x 28 = 3080; 8000 / 1.9331 / 28 = 147.8 -> 4116;
    # 294 x 220 patches / 4 = 16,170
    assert QWEN25.resized(8000, 6000) == (4116, 3080)
    assert QWEN25.tokens(8000, 6000) == 16_170
    # Qwen3-VL, 100x80: 3 x 32 by 2 x 32 (80 / 32 = 2.5 rounds to even) is 6,144 pixels, under
    # 65,536: scaled up by sqrt(65,536 / 8,000) = 2.8622 and ceiled to 32:
    # 80 x 2.8622 / 32 = 7.16 -> 8 x 32 = 256; 100 x 2.8622 / 32 = 8.94 -> 288; 18 x 16 / 4 = 72
    assert QWEN3.resized(100, 80) == (288, 256)
    assert QWEN3.tokens(100, 80) == 72


def test_fixed_families_take_the_same_tokens_whatever_the_size():
    gemma = ImageTokenRule(family="gemma3", patch_size=14, fixed_tokens=256, fixed_patches=4096)
    assert {gemma.tokens(w, h) for w, h in ((64, 64), (1920, 1080), (8000, 6000))} == {256}
    assert gemma.resized(1920, 1080) == (896, 896)  # 64 patches of 14 a side


def test_processor_kwargs_move_the_bounds_and_bad_ones_are_refused():
    capped = QWEN25.with_processor_kwargs({"max_pixels": 1_003_520})  # 1,280 tokens' worth
    assert capped.tokens(4000, 3000) <= 1_003_520 // (28 * 28)
    assert capped.tokens(4000, 3000) < QWEN25.tokens(4000, 3000)
    for bad, says in (
        ({"max_pixels": 0}, "positive integer"),
        ({"min_pixels": 10_000_000, "max_pixels": 1_000}, "is over max_pixels"),
        ({"do_resize": False}, "not planned"),
    ):
        with pytest.raises(InvalidArgumentError, match=says):
            QWEN25.with_processor_kwargs(bad)
    with pytest.raises(InvalidArgumentError, match="aspect ratio"):
        QWEN25.tokens(10_000, 20)


def _plan(*args: str):
    result = CliRunner().invoke(cli, ["plan", "--gpu", "H100", "--offline", "--json", *args])
    doc = json.loads(result.output) if result.output.startswith("{") else None
    return result.exit_code, doc, result.output


def test_a_requests_images_join_its_prompt_and_its_ttft():
    model = "Qwen/Qwen3-VL-8B-Instruct"
    code, text, _ = _plan(model, "--input-len", "512", "--concurrency", "1")
    assert code == 0
    code, doc, _ = _plan(
        model,
        "--input-len",
        "512",
        "--concurrency",
        "1",
        "--image-size",
        "1920x1080",
        "--images-per-request",
        "2",
    )
    assert code == 0
    perf, base = doc["performance"], text["performance"]
    assert perf["workload"].startswith(f"{512 + 2 * 2_040} in / 256 out")
    assert perf["ttft_s"] > base["ttft_s"]
    assert any("2 images of 1920x1080" in a for a in perf["assumptions"])
    assert doc["vllm_command"].endswith("--limit-mm-per-prompt '{\"image\": 2}'")
    code, doc, _ = _plan(
        model, "--image-size", "4000x3000", "--mm-processor-kwargs", '{"max_pixels": 1003520}'
    )
    assert code == 0
    assert "--mm-processor-kwargs '{\"max_pixels\":1003520}'" in doc["vllm_command"]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["Qwen/Qwen3-8B", "--image-size", "640x480"], "has no vision tower"),
        (["Qwen/Qwen3-VL-8B-Instruct", "--images-per-request", "2"], "needs --image-size"),
        (["Qwen/Qwen3-VL-8B-Instruct", "--image-size", "640"], "WIDTHxHEIGHT"),
        (["google/gemma-4-26B-A4B", "--image-size", "640x480"], "does not count"),
    ],
)
def test_an_image_workload_servefit_cannot_count_is_refused(args, says):
    code, _, out = _plan(*args)
    assert code == 2, out
    assert says in out.replace("\n", " ")


def test_recommend_refuses_images_it_would_not_count():
    args = ["Qwen/Qwen3-VL-8B-Instruct", "--concurrency", "4", "--image-size", "640x480"]
    result = CliRunner().invoke(cli, ["recommend", *args, "--offline"])
    assert result.exit_code == 2
    assert "does not count image tokens" in result.output


def test_every_command_planning_on_one_resolved_model_counts_the_images():
    # compare plans each GPU's cell on the model resolved once; the layout search (--num-gpus)
    # each layout: both settle the images as plan does (1,024 text + 2,040 image tokens)
    args = ["Qwen/Qwen3-VL-8B-Instruct", "--concurrency", "2", "--offline", "--json"]
    with_images = [*args, "--image-size", "1920x1080"]
    compare = [
        json.loads(CliRunner().invoke(cli, ["compare", *a, "--gpus", "H100"]).output)
        for a in (args, with_images)
    ]
    ttft = [doc["rows"][0]["performance"]["ttft_s"] for doc in compare]
    assert ttft[1] > ttft[0]
    assert compare[1]["workload"].endswith("an image of 1920x1080 a request")
    layouts = CliRunner().invoke(cli, ["plan", *with_images, "--gpu", "H100", "--num-gpus", "2"])
    assert json.loads(layouts.output)["performance"]["workload"].startswith("3064 in")


def test_qwen25_vl_reads_its_flat_config_with_its_vision_tower():
    from servefit.adapters.model_source import load_model
    from servefit.core.weights import count_params

    spec = load_model("Qwen/Qwen2.5-VL-7B-Instruct", allow_hub=False).spec
    # a training log printing the loaded model: "Qwen2_5_VLForConditionalGeneration contains
    # 8.29B parameters" (the catalog entry's source); 28 Qwen2 layers with q/k/v biases
    assert round(count_params(spec).total / 1e9, 2) == 8.29
    assert spec.num_layers == 28 and spec.vision is not None
    assert spec.vision.full_attention_blocks == (7, 15, 23, 31)
    assert spec.vision.window_patches == (112 // 14) ** 2
    assert spec.vision.image_rule is not None and spec.vision.image_rule.patch_size == 14


def _catalog_rule(model: str) -> ImageTokenRule:
    from servefit.adapters.model_source import load_model

    vision = load_model(model, allow_hub=False).spec.vision
    assert vision is not None and vision.image_rule is not None
    return vision.image_rule


def test_qwen35_and_36_count_images_with_the_qwen3_vl_processor():
    # vLLM's qwen3_5.py serves Qwen3.5 / 3.6 with Qwen3VLProcessingInfo: the same smart_resize
    # and patch 16; 1920x1080 -> 1920x1088, (120 x 68) / 4 = 2,040 tokens
    qwen3_vl = _catalog_rule("Qwen/Qwen3-VL-8B-Instruct")
    for model in ("Qwen/Qwen3.6-27B", "Qwen/Qwen3.5-35B-A3B"):
        rule = _catalog_rule(model)
        for w, h in ((640, 480), (1920, 1080), (8000, 6000), (100, 80)):
            assert rule.tokens(w, h) == qwen3_vl.tokens(w, h), (model, w, h)
        assert rule.tokens(1920, 1080) == 2040


@pytest.mark.parametrize(
    ("size", "canvas", "tokens"),
    [
        # get_best_fit over every rows x columns of at most 16 tiles of 336: 640x480 upscales
        # least onto 2 x 2 (672/640 = 1.05 across, 672/480 = 1.4 down); tokens
        # 4 tiles x (144 + 1 separator) + 144 global + 3 = 727
        ((640, 480), (2, 2), 4 * 145 + 147),
        # 1920x1080 does not fit 16 tiles unscaled: the least downscale is 5 x 3
        # (1008/1080 = 0.933 down, 1680/1920 = 0.875 across -> 0.875; 4 x 4 gives 0.7):
        # 15 x 145 + 147 = 2,322
        ((1920, 1080), (5, 3), 15 * 145 + 147),
        # one tile: no separators, no global tile: 144 + 3
        ((100, 80), (1, 1), 147),
        ((336, 336), (1, 1), 147),
        # a pixel over the tile: 2 tiles across (scale 1 with the least area)
        ((337, 336), (2, 1), 2 * 145 + 147),
    ],
)
def test_llama4_tiles_an_image_on_the_processors_canvas(size, canvas, tokens):
    rule = _catalog_rule("meta-llama/Llama-4-Scout-17B-16E-Instruct")
    assert rule.canvas(*size) == canvas
    assert rule.tokens(*size) == tokens
    assert rule.resized(*size) == (canvas[0] * 336, canvas[1] * 336)
    # the encoder runs 577 positions (24 x 24 patches + CLS) a tile, the global one included
    tiles = canvas[0] * canvas[1]
    assert rule.patches(*size) == (tiles + (1 if tiles > 1 else 0)) * 577


def test_llama4_max_patches_moves_the_canvas_and_other_kwargs_are_refused():
    rule = _catalog_rule("meta-llama/Llama-4-Scout-17B-16E-Instruct")
    four = rule.with_processor_kwargs({"max_patches": 4})
    # 1920x1080 on at most 4 tiles: 2 x 2 (min(672/1080, 672/1920) = 0.35) beats 4 or 3
    # across one row (336/1080 = 0.31)
    assert four.canvas(1920, 1080) == (2, 2)
    assert four.tokens(1920, 1080) == 4 * 145 + 147
    with pytest.raises(InvalidArgumentError, match="max_patches"):
        rule.with_processor_kwargs({"max_pixels": 1_000_000})
    with pytest.raises(InvalidArgumentError, match="positive integer"):
        rule.with_processor_kwargs({"max_patches": 0})
