"""How many tokens an image becomes, as each model family's Hugging Face processor counts
them (vLLM runs the same processors), and how many positions its vision encoder runs over.

The rules, by the checkpoint's ``model_type``:

- **Qwen2-VL, Qwen2.5-VL, Qwen3-VL, Qwen3.5 / 3.6** (``smart_resize`` in transformers'
  ``image_processing_qwen2_vl.py``): each side is rounded to a multiple of ``patch x merge``,
  then the area is scaled into ``[min_pixels, max_pixels]`` (down by flooring, up by
  ceiling, keeping the aspect ratio); the encoder runs over ``(h / patch) x (w / patch)``
  patches and every ``merge x merge`` of them becomes one token. The pixel bounds are the
  checkpoints' ``preprocessor_config.json``: 3,136 to 12,845,056 for Qwen2/2.5-VL (patch 14),
  65,536 to 16,777,216 for Qwen3-VL (patch 16), and Qwen3-VL's for Qwen3.5 and 3.6, which
  vLLM serves with the Qwen3-VL processor; ``--mm-processor-kwargs`` may change them.
- **Gemma 3**: every image is resized to the encoder's square (896 pixels) and pooled to
  ``mm_tokens_per_image`` tokens (256, transformers' ``Gemma3Config`` default), whatever its
  size (pan-and-scan is off by default).
- **LLaVA 1.5**: the image is resized to the CLIP tower's square; one token per patch,
  ``(image_size / patch)^2`` (576 at 336 / 14), plus the CLS token when
  ``vision_feature_select_strategy`` is ``full``.

- **Llama 4** (transformers ``image_processing_llama4.py`` and ``processing_llama4.py``): the
  image goes onto the canvas of tiles (the tower's ``image_size``, 336) that ``get_best_fit``
  picks among every rows x columns of at most ``max_patches`` (16) tiles: the smallest
  upscale that fits, else the least downscale, then the smallest area; each tile is
  ``(336 / 14)^2 / 4`` = 144 tokens (pixel shuffle 0.5) and a separator, a canvas of more
  than one tile adds a global tile, and the image its start, end and ``<|image|>`` tokens.

A family without a rule here refuses an image workload, naming it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from fractions import Fraction
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
    tile_size: int = 0  # a tiled family's tile side in pixels (0: not tiled)
    max_tiles: int = 0  # the processor's max_patches
    tile_tokens: int = 0  # tokens of one tile after the projector
    source: str = ""

    @property
    def resizes(self) -> bool:
        return self.fixed_tokens == 0 and self.tile_size == 0

    def canvas(self, width: int, height: int) -> tuple[int, int]:
        """A tiled family's (tiles across, tiles down) for an image: ``get_best_fit`` over
        ``find_supported_resolutions`` (the scales compared exactly)."""
        _check_size(width, height)
        options: list[tuple[int, int]] = []  # (rows, columns) in the processor's order
        by_ratio: dict[Fraction, list[tuple[int, int]]] = {}
        for tiles in range(self.max_tiles, 0, -1):
            for rows in (f for f in range(1, tiles + 1) if tiles % f == 0):
                by_ratio.setdefault(Fraction(rows, tiles // rows), []).append((rows, tiles // rows))
        for shapes in by_ratio.values():
            options.extend(shapes)
        side = self.tile_size
        scales = [min(Fraction(r * side, height), Fraction(c * side, width)) for r, c in options]
        up = [x for x in scales if x >= 1]
        chosen = min(up) if up else max(scales)
        fits = [o for o, x in zip(options, scales, strict=True) if x == chosen]
        rows, columns = min(fits, key=lambda o: o[0] * o[1])  # the first of the least area
        return columns, rows

    def resized(self, width: int, height: int) -> tuple[int, int]:
        """(width, height) the processor feeds the encoder."""
        _check_size(width, height)
        if self.tile_size:
            columns, rows = self.canvas(width, height)
            return columns * self.tile_size, rows * self.tile_size
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
        if self.tile_size:
            columns, rows = self.canvas(width, height)
            tiles = columns * rows + (1 if columns * rows > 1 else 0)  # the global tile
            return tiles * ((self.tile_size // self.patch_size) ** 2 + 1)  # + CLS a tile
        if not self.resizes:
            _check_size(width, height)
            return self.fixed_patches
        w, h = self.resized(width, height)
        return (w // self.patch_size) * (h // self.patch_size)

    def tokens(self, width: int, height: int) -> int:
        """Tokens one image takes in the prompt (its placeholder's expansion)."""
        if self.tile_size:
            columns, rows = self.canvas(width, height)
            tiles = columns * rows
            # _prompt_split_image: <|image_start|>, each tile's patches and separator (when
            # there are several), <|image|>, the global tile's patches, <|image_end|>
            tiled = tiles * (self.tile_tokens + 1) if tiles > 1 else 0
            return tiled + self.tile_tokens + 3
        if not self.resizes:
            _check_size(width, height)
            return self.fixed_tokens
        return self.patches(width, height) // (self.merge_size * self.merge_size)

    def with_processor_kwargs(self, kwargs: dict[str, Any]) -> ImageTokenRule:
        """The rule under vLLM's ``--mm-processor-kwargs`` (min_pixels / max_pixels, or a
        tiled family's max_patches)."""
        if self.tile_size:
            return self._with_max_patches(kwargs)
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

    def _with_max_patches(self, kwargs: dict[str, Any]) -> ImageTokenRule:
        unknown = sorted(set(kwargs) - {"max_patches"})
        if unknown:
            raise InvalidArgumentError(
                f"--mm-processor-kwargs: {', '.join(unknown)} is not planned for "
                f"{self.family} (its processor takes max_patches in servefit)"
            )
        tiles = kwargs.get("max_patches", self.max_tiles)
        if isinstance(tiles, bool) or not isinstance(tiles, int) or tiles < 1:
            raise InvalidArgumentError(
                f"--mm-processor-kwargs: max_patches must be a positive integer, got {tiles!r}"
            )
        return replace(self, max_tiles=tiles)


def _check_size(width: int, height: int) -> None:
    if width < 1 or height < 1:
        raise InvalidArgumentError(f"--image-size {width}x{height}: give positive pixels (WxH)")


# (model_type) -> (min_pixels, max_pixels, source of the bounds)
_QWEN_BOUNDS = {
    "qwen2_vl": (3_136, 12_845_056, "Qwen/Qwen2-VL-7B-Instruct preprocessor_config.json"),
    "qwen2_5_vl": (3_136, 12_845_056, "Qwen/Qwen2.5-VL-7B-Instruct preprocessor_config.json"),
    "qwen3_vl": (65_536, 16_777_216, "Qwen/Qwen3-VL-8B-Instruct preprocessor_config.json"),
    "qwen3_vl_moe": (65_536, 16_777_216, "Qwen/Qwen3-VL-30B-A3B-Instruct preprocessor_config"),
    # vLLM's qwen3_5.py: Qwen3_5ProcessingInfo / Qwen3_5MoeProcessingInfo subclass
    # Qwen3VLProcessingInfo (the Qwen3-VL processor and patch 16); Qwen3.5's own
    # preprocessor_config.json was not read: Qwen3-VL's bounds are taken
    "qwen3_5": (65_536, 16_777_216, "Qwen3-VL's (vLLM serves Qwen3.5 with its processor)"),
    "qwen3_5_moe": (65_536, 16_777_216, "Qwen3-VL's (vLLM serves Qwen3.5 with its processor)"),
}
GEMMA3_TOKENS_PER_IMAGE = 256  # transformers Gemma3Config.mm_tokens_per_image default
LLAMA4_MAX_TILES = 16  # transformers Llama4ImageProcessor max_patches default
LLAMA4_PIXEL_SHUFFLE_RATIO = 0.5  # transformers Llama4VisionConfig default


def image_rule(config: dict[str, Any], vision: dict[str, Any]) -> ImageTokenRule | None:
    """The rule of a multimodal ``config.json`` (its ``vision_config`` apart), or None."""
    model_type = config.get("model_type")
    if not isinstance(model_type, str):
        return None  # the config's own parse names a model_type that is not a string
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
    if model_type == "llama4":
        ratio = vision.get("pixel_shuffle_ratio", LLAMA4_PIXEL_SHUFFLE_RATIO)
        if isinstance(ratio, bool) or not isinstance(ratio, int | float) or not 0 < ratio <= 1:
            return None
        shuffle = round(1.0 / (ratio * ratio))  # Llama4Processor.downsample_ratio
        return ImageTokenRule(
            family="llama4",
            patch_size=patch,
            tile_size=size,
            max_tiles=LLAMA4_MAX_TILES,
            tile_tokens=side // shuffle,
            source=f"tiles of {size}x{size} on get_best_fit's canvas, up to max_patches "
            f"{LLAMA4_MAX_TILES} (transformers Llama4ImageProcessor, Llama4Processor)",
        )
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
            "Qwen2-VL, Qwen2.5-VL, Qwen3-VL, Qwen3.5 / 3.6, Llama 4, Gemma 3 and LLaVA 1.5 as "
            "their processors do)"
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
