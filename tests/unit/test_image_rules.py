"""Which image rule a multimodal config.json gets (``image_rule``), read from its fields the
way the processors read them, and the rule's refusals of sizes and settings it cannot count.

Each rule's numbers are the processors' arithmetic written out (transformers
image_processing_qwen2_vl.py smart_resize, Gemma3Processor, LlavaProcessor, Llama4Processor)."""

from __future__ import annotations

import pytest

from servefit.core.image_tokens import ImageTokenRule, ImageWorkload, image_rule
from servefit.errors import InvalidArgumentError

QWEN3_VISION = {"patch_size": 16, "spatial_merge_size": 2}
LLAMA4_VISION = {"patch_size": 14, "image_size": 336}


def _rule(model_type: str, vision: dict, **config) -> ImageTokenRule | None:
    return image_rule({"model_type": model_type, **config}, vision)


def test_qwen_families_take_their_bounds_and_merge():
    for model_type, low, high in (
        ("qwen2_vl", 3_136, 12_845_056),
        ("qwen2_5_vl", 3_136, 12_845_056),
        ("qwen3_vl", 65_536, 16_777_216),
        ("qwen3_vl_moe", 65_536, 16_777_216),
        ("qwen3_5", 65_536, 16_777_216),
        ("qwen3_5_moe", 65_536, 16_777_216),
    ):
        rule = _rule(model_type, QWEN3_VISION)
        assert rule is not None
        assert (rule.family, rule.patch_size, rule.merge_size) == (model_type, 16, 2)
        assert (rule.min_pixels, rule.max_pixels) == (low, high)
        assert rule.resizes
    # spatial_merge_size left out is 2 (the Qwen vision configs' default); 1 is taken as given:
    # 640x480 at patch 16 and merge 1 rounds to 640 x 480, 40 x 30 patches, one token each
    assert _rule("qwen3_vl", {"patch_size": 16}).merge_size == 2
    single = _rule("qwen3_vl", {"patch_size": 16, "spatial_merge_size": 1})
    assert single.tokens(640, 480) == 40 * 30


@pytest.mark.parametrize(
    "vision",
    [
        {"patch_size": True},
        {"patch_size": "16"},
        {"patch_size": 0},
        {},
        {"patch_size": 16, "spatial_merge_size": 0},
        {"patch_size": 16, "spatial_merge_size": True},
        {"patch_size": 16, "spatial_merge_size": 2.0},
    ],
)
def test_a_qwen_vision_config_servefit_cannot_read_has_no_rule(vision):
    assert _rule("qwen3_vl", vision) is None


@pytest.mark.parametrize("size", [None, True, "896", 13, 0])
def test_a_fixed_square_without_a_usable_image_size_has_no_rule(size):
    vision = {"patch_size": 14} if size is None else {"patch_size": 14, "image_size": size}
    for model_type in ("gemma3", "llava", "llama4"):
        assert _rule(model_type, vision) is None, (model_type, size)


def test_gemma3_reads_mm_tokens_per_image_and_refuses_a_bad_one():
    vision = {"patch_size": 14, "image_size": 896}
    default = _rule("gemma3", vision)
    assert (default.fixed_tokens, default.fixed_patches) == (256, 64 * 64)
    assert _rule("gemma3", vision, mm_tokens_per_image=64).fixed_tokens == 64
    for bad in (0, True, "256", 1.5):
        assert _rule("gemma3", vision, mm_tokens_per_image=bad) is None, bad


def test_llava_counts_the_cls_token_only_with_the_full_strategy():
    vision = {"patch_size": 14, "image_size": 336}
    default = _rule("llava", vision)
    full = _rule("llava", vision, vision_feature_select_strategy="full")
    # (336 / 14)^2 = 576 patches; the encoder runs them and the CLS position
    assert (default.fixed_tokens, default.fixed_patches) == (576, 577)
    assert (full.fixed_tokens, full.fixed_patches) == (577, 577)


def test_llama4_reads_its_tile_and_pixel_shuffle():
    rule = _rule("llama4", LLAMA4_VISION)
    assert (rule.tile_size, rule.max_tiles, rule.tile_tokens) == (336, 16, 144)
    assert not rule.resizes
    # pixel_shuffle_ratio 0.25: downsample round(1 / 0.0625) = 16 -> 576 / 16 = 36 a tile
    quarter = _rule("llama4", {**LLAMA4_VISION, "pixel_shuffle_ratio": 0.25})
    assert quarter.tile_tokens == 36
    assert quarter.tokens(100, 80) == 36 + 3
    for bad in (0, -0.5, 1.5, True, "0.5"):
        assert _rule("llama4", {**LLAMA4_VISION, "pixel_shuffle_ratio": bad}) is None, bad


def test_families_without_a_rule_are_none():
    assert _rule("gemma4", {"patch_size": 16}) is None
    # a model_type that is not a string (the fuzzer's list) is no family, not a crash
    assert image_rule({"model_type": []}, QWEN3_VISION) is None
    assert image_rule({}, QWEN3_VISION) is None
    assert _rule("mllama", {"patch_size": 14, "image_size": 560}) is None


@pytest.mark.parametrize(("width", "height"), [(0, 480), (640, 0), (-1, 480)])
def test_every_rule_refuses_a_size_without_pixels(width, height):
    for rule in (
        _rule("qwen3_vl", QWEN3_VISION),
        _rule("gemma3", {"patch_size": 14, "image_size": 896}),
        _rule("llama4", LLAMA4_VISION),
    ):
        for count in (rule.tokens, rule.patches, rule.resized):
            with pytest.raises(InvalidArgumentError, match="give positive pixels"):
                count(width, height)


def test_smart_resize_refuses_an_aspect_ratio_over_200_and_takes_200():
    rule = _rule("qwen3_vl", QWEN3_VISION)
    with pytest.raises(InvalidArgumentError, match="aspect ratio over 200"):
        rule.resized(20_100, 100)
    rule.resized(20_000, 100)  # exactly 200 is taken


def test_processor_kwargs_name_what_the_family_takes():
    gemma = _rule("gemma3", {"patch_size": 14, "image_size": 896})
    with pytest.raises(InvalidArgumentError, match="takes no size settings"):
        gemma.with_processor_kwargs({"max_pixels": 1_000_000})
    qwen = _rule("qwen3_vl", QWEN3_VISION)
    with pytest.raises(InvalidArgumentError, match="do_resize is not planned"):
        qwen.with_processor_kwargs({"do_resize": False})
    for bad in (True, "100000", 0, -5, 1.5):
        with pytest.raises(InvalidArgumentError, match="min_pixels must be a positive integer"):
            qwen.with_processor_kwargs({"min_pixels": bad})
    # equal bounds are taken: every image is scaled to that area
    same = qwen.with_processor_kwargs({"min_pixels": 262_144, "max_pixels": 262_144})
    assert (same.min_pixels, same.max_pixels) == (262_144, 262_144)
    llama4 = _rule("llama4", LLAMA4_VISION)
    with pytest.raises(InvalidArgumentError, match="max_pixels is not planned for llama4"):
        llama4.with_processor_kwargs({"max_pixels": 1})
    with pytest.raises(InvalidArgumentError, match="max_patches must be a positive integer"):
        llama4.with_processor_kwargs({"max_patches": True})
    assert llama4.with_processor_kwargs({}).max_tiles == 16


def test_an_image_workload_needs_pixels_and_at_least_one_image():
    assert ImageWorkload(width=640, height=480).describe() == "an image of 640x480 a request"
    two = ImageWorkload(width=640, height=480, per_request=2)
    assert two.describe() == "2 images of 640x480 a request"
    with pytest.raises(InvalidArgumentError, match="--images-per-request 0"):
        ImageWorkload(width=640, height=480, per_request=0)
    with pytest.raises(InvalidArgumentError, match="give positive pixels"):
        ImageWorkload(width=0, height=480)


def test_the_smallest_legal_values_are_taken():
    # one pixel, patch 1, one token: the refusals start below 1, not at it
    assert _rule("qwen3_vl", {"patch_size": 1, "spatial_merge_size": 1}) is not None
    assert _rule("gemma3", {"patch_size": 14, "image_size": 14}).fixed_patches == 1
    assert _rule("gemma3", {"patch_size": 14, "image_size": 896}, mm_tokens_per_image=1) is not None
    qwen = _rule("qwen3_vl", QWEN3_VISION)
    assert qwen.with_processor_kwargs({"min_pixels": 1}).min_pixels == 1
    # a 1 x 1 image is an image: 32 x 32 is under 65,536 pixels, so scaled by sqrt(65,536) =
    # 256 and ceiled to 32: 256 x 256, 16 x 16 patches of 16, / 4 = 64 tokens
    assert qwen.resized(1, 1) == (256, 256) and qwen.tokens(1, 1) == 64
    llama4 = _rule("llama4", LLAMA4_VISION)
    one = llama4.with_processor_kwargs({"max_patches": 1})
    assert one.canvas(1920, 1080) == (1, 1) and one.tokens(1920, 1080) == 147
    assert _rule("llama4", {**LLAMA4_VISION, "pixel_shuffle_ratio": 1}).tile_tokens == 576


def test_an_area_on_a_bound_is_kept_as_rounded():
    # 512 x 512 at Qwen3-VL is 262,144 pixels: with max_pixels exactly that, no downscale;
    # with min_pixels exactly that, no upscale: 32 x 32 patches of 16, / 4 = 256 tokens
    qwen = _rule("qwen3_vl", QWEN3_VISION)
    at_max = qwen.with_processor_kwargs({"min_pixels": 1, "max_pixels": 262_144})
    at_min = qwen.with_processor_kwargs({"min_pixels": 262_144, "max_pixels": 16_777_216})
    assert at_max.resized(512, 512) == (512, 512) == at_min.resized(512, 512)
    assert at_max.tokens(512, 512) == (512 // 16) ** 2 // 4 == 256


def test_each_rule_names_its_source():
    for rule in (
        _rule("qwen2_5_vl", QWEN3_VISION),
        _rule("gemma3", {"patch_size": 14, "image_size": 896}),
        _rule("llava", {"patch_size": 14, "image_size": 336}),
        _rule("llama4", LLAMA4_VISION),
    ):
        assert "transformers" in rule.source, rule.family
    assert (
        "Qwen/Qwen2.5-VL-7B-Instruct preprocessor_config.json"
        in _rule("qwen2_5_vl", QWEN3_VISION).source
    )


def test_llama4_canvas_ties_take_the_least_area_first():
    # 336 x 336 fits 1 x 1 at scale 1.0, as do 1 x 2, 2 x 1, 2 x 2 ... : the least area wins
    rule = _rule("llama4", LLAMA4_VISION)
    assert rule.canvas(336, 336) == (1, 1)
    # 672 x 336 (two tiles across at scale 1.0); 2 x 2 and 2 x 3 also reach 1.0: 1 row x 2
    assert rule.canvas(672, 336) == (2, 1)
    assert rule.canvas(336, 672) == (1, 2)
    # 1000 x 336: across 3 tiles (1008) scale min(1008/1000, 336/336) = 1.0 upscale-free
    assert rule.canvas(1000, 336) == (3, 1)
    # the encoder runs 577 positions a tile, in whole numbers
    assert rule.patches(672, 336) == 3 * 577 and isinstance(rule.patches(672, 336), int)
    assert isinstance(rule.tile_tokens, int)
