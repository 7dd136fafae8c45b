"""How many tokens an image becomes, as each model family's Hugging Face processor counts
them (vLLM runs the same processors), and how many positions its vision encoder runs over.

The rules, by the checkpoint's ``model_type``:

- **Qwen2-VL, Qwen2.5-VL, Qwen3-VL** (``smart_resize`` in transformers'
  ``image_processing_qwen2_vl.py``): each side is rounded to a multiple of ``patch x merge``,
  then the area is scaled into ``[min_pixels, max_pixels]`` (down by flooring, up by
  ceiling, keeping the aspect ratio); the encoder runs over ``(h / patch) x (w / patch)``
  patches and every ``merge x merge`` of them becomes one token. The pixel bounds are the
  checkpoints' ``preprocessor_config.json``: 3,136 to 12,845,056 for Qwen2/2.5-VL (patch 14),
  65,536 to 16,777,216 for Qwen3-VL (patch 16); ``--mm-processor-kwargs`` may change them.
- **Gemma 3**: every image is resized to the encoder's square (896 pixels) and pooled to
  ``mm_tokens_per_image`` tokens (256, transformers' ``Gemma3Config`` default), whatever its
  size (pan-and-scan is off by default).
- **LLaVA 1.5**: the image is resized to the CLIP tower's square; one token per patch,
  ``(image_size / patch)^2`` (576 at 336 / 14), plus the CLS token when
  ``vision_feature_select_strategy`` is ``full``.

A family without a rule here refuses an image workload, naming it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from servefit.errors import InvalidArgumentError

MAX_ASPECT_RATIO = 200  # smart_resize refuses a longer side over 200 x the shorter


@dataclass(frozen=True, slots=True, kw_only=True)
class ImageTokenRule:
    """One family's count of an image's tokens and encoder positions."""

    family: str
    patch_size: int
    merge_size: int = 1
    min_pixels: int = 0  # smart_resize's bounds (0: a fixed-size family)
    max_pixels: int = 0
    fixed_tokens: int = 0  # tokens of every image (0: smart_resize)
    fixed_patches: int = 0  # encoder positions of every image (fixed families)
    source: str = ""

    @property
    def resizes(self) -> bool:
        return self.fixed_tokens == 0

    def resized(self, width: int, height: int) -> tuple[int, int]:
        """(width, height) the processor feeds the encoder."""
        _check_size(width, height)
        if not self.resizes:
            side = self.patch_size * math.isqrt(self.fixed_patches)
            return side, side
        factor = self.patch_size * self.merge_size
        if max(width, height) > MAX_ASPECT_RATIO * min(width, height):
            raise InvalidArgumentError(
                f"--image-size {width}x{height}: the {self.family} processor refuses an aspect "
                f"ratio over {MAX_ASPECT_RATIO}"
            )
        h = max(factor, round(height / factor) * factor)
        w = max(factor, round(width / factor) * factor)
        if h * w > self.max_pixels:
            scale = math.sqrt(height * width / self.max_pixels)
            h = max(factor, math.floor(height / scale / factor) * factor)
            w = max(factor, math.floor(width / scale / factor) * factor)
        elif h * w < self.min_pixels:
            scale = math.sqrt(self.min_pixels / (height * width))
            h = math.ceil(height * scale / factor) * factor
            w = math.ceil(width * scale / factor) * factor
        return w, h

    def patches(self, width: int, height: int) -> int:
        """Positions the vision encoder runs over for one image."""
        if not self.resizes:
            _check_size(width, height)
            return self.fixed_patches
        w, h = self.resized(width, height)
        return (w // self.patch_size) * (h // self.patch_size)

    def tokens(self, width: int, height: int) -> int:
        """Tokens one image takes in the prompt (its placeholder's expansion)."""
        if not self.resizes:
            _check_size(width, height)
            return self.fixed_tokens
        return self.patches(width, height) // (self.merge_size * self.merge_size)

    def with_processor_kwargs(self, kwargs: dict[str, Any]) -> ImageTokenRule:
        """The rule under vLLM's ``--mm-processor-kwargs`` (min_pixels / max_pixels)."""
        unknown = sorted(set(kwargs) - {"min_pixels", "max_pixels"})
        if unknown or not self.resizes:
            takes = "min_pixels and max_pixels" if self.resizes else "no size settings"
            raise InvalidArgumentError(
                f"--mm-processor-kwargs: {', '.join(unknown or kwargs)} is not planned for "
                f"{self.family} (its processor takes {takes} in servefit)"
            )
        bounds = {k: kwargs.get(k, getattr(self, k)) for k in ("min_pixels", "max_pixels")}
        for key, value in bounds.items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidArgumentError(
                    f"--mm-processor-kwargs: {key} must be a positive integer, got {value!r}"
                )
        if bounds["min_pixels"] > bounds["max_pixels"]:
            raise InvalidArgumentError(
                f"--mm-processor-kwargs: min_pixels {bounds['min_pixels']:,} is over max_pixels "
                f"{bounds['max_pixels']:,}"
            )
        return replace(self, **bounds)


def _check_size(width: int, height: int) -> None:
    if width < 1 or height < 1:
        raise InvalidArgumentError(f"--image-size {width}x{height}: give positive pixels (WxH)")


# (model_type) -> (min_pixels, max_pixels, source of the bounds)
_QWEN_BOUNDS = {
    "qwen2_vl": (3_136, 12_845_056, "Qwen/Qwen2-VL-7B-Instruct preprocessor_config.json"),
    "qwen2_5_vl": (3_136, 12_845_056, "Qwen/Qwen2.5-VL-7B-Instruct preprocessor_config.json"),
    "qwen3_vl": (65_536, 16_777_216, "Qwen/Qwen3-VL-8B-Instruct preprocessor_config.json"),
    "qwen3_vl_moe": (65_536, 16_777_216, "Qwen/Qwen3-VL-30B-A3B-Instruct preprocessor_config"),
}
GEMMA3_TOKENS_PER_IMAGE = 256  # transformers Gemma3Config.mm_tokens_per_image default


def image_rule(config: dict[str, Any], vision: dict[str, Any]) -> ImageTokenRule | None:
    """The rule of a multimodal ``config.json`` (its ``vision_config`` apart), or None."""
    model_type = config.get("model_type")
    patch = vision.get("patch_size")
    if isinstance(patch, bool) or not isinstance(patch, int) or patch < 1:
        return None
    if model_type in _QWEN_BOUNDS:
        low, high, source = _QWEN_BOUNDS[model_type]
        merge = vision.get("spatial_merge_size", 2)
        if isinstance(merge, bool) or not isinstance(merge, int) or merge < 1:
            return None
        return ImageTokenRule(
            family=str(model_type),
            patch_size=patch,
            merge_size=merge,
            min_pixels=low,
            max_pixels=high,
            source=f"smart_resize (transformers image_processing_qwen2_vl.py); bounds: {source}",
        )
    size = vision.get("image_size")
    if isinstance(size, bool) or not isinstance(size, int) or size < patch:
        return None
    side = (size // patch) ** 2
    if model_type == "gemma3":
        tokens = config.get("mm_tokens_per_image", GEMMA3_TOKENS_PER_IMAGE)
        if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1:
            return None  # a count servefit cannot read: no image rule, said when asked
        return ImageTokenRule(
            family="gemma3",
            patch_size=patch,
            fixed_tokens=tokens,
            fixed_patches=side,
            source=f"every image resized to {size}x{size} and pooled to mm_tokens_per_image "
            "(transformers Gemma3Processor)",
        )
    if model_type == "llava":
        full = config.get("vision_feature_select_strategy") == "full"
        return ImageTokenRule(
            family="llava",
            patch_size=patch,
            fixed_tokens=side + (1 if full else 0),
            fixed_patches=side + 1,
            source=f"every image resized to {size}x{size}, one token a patch "
            "(transformers LlavaProcessor)",
        )
    return None


@dataclass(frozen=True, slots=True, kw_only=True)
class ImageWorkload:
    """The images each request carries (``--image-size``, ``--images-per-request``) and
    vLLM's ``--mm-processor-kwargs`` for the processor that counts their tokens."""

    width: int
    height: int
    per_request: int = 1
    processor_kwargs: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self) -> None:
        _check_size(self.width, self.height)
        if self.per_request < 1:
            raise InvalidArgumentError(
                f"--images-per-request {self.per_request}: give at least 1 (or no --image-size)"
            )

    def describe(self) -> str:
        each = "an image" if self.per_request == 1 else f"{self.per_request} images"
        return f"{each} of {self.width}x{self.height} a request"


@dataclass(frozen=True, slots=True, kw_only=True)
class ImageLoad:
    """What one request's images add: prompt tokens and the encoder's FLOPs."""

    tokens_per_request: int
    encoder_flops_per_request: float
    note: str


def image_load(vision: Any, images: ImageWorkload, model: str) -> ImageLoad:
    """The prompt tokens and encoder FLOPs of ``images`` on a model whose vision tower is
    ``vision`` (a :class:`~servefit.core.model_spec.VisionSpec`, None: text only)."""
    rule = getattr(vision, "image_rule", None)
    if vision is None:
        raise InvalidArgumentError(
            f"--image-size: {model} has no vision tower (its config.json has no vision_config)"
        )
    if rule is None:
        raise InvalidArgumentError(
            f"--image-size: servefit does not count {model}'s image tokens yet (it counts "
            "Qwen2-VL, Qwen2.5-VL, Qwen3-VL, Gemma 3 and LLaVA 1.5 as their processors do)"
        )
    if images.processor_kwargs:
        rule = rule.with_processor_kwargs(dict(images.processor_kwargs))
    w, h = images.width, images.height
    tokens, patches = rule.tokens(w, h), rule.patches(w, h)
    rw, rh = rule.resized(w, h)
    note = (
        f"{images.describe()}: each resized to {rw}x{rh} and {tokens:,} prompt tokens "
        f"({patches:,} encoder positions; {rule.source})"
    )
    return ImageLoad(
        tokens_per_request=images.per_request * tokens,
        encoder_flops_per_request=images.per_request * vision.encoder_flops(patches),
        note=note,
    )
