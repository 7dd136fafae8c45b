"""The images a workload's requests carry (``--image-size``, ``--images-per-request``) and
vLLM's ``--mm-processor-kwargs``: the model's processor rule turns them into prompt tokens
and encoder work (:mod:`servefit.core.image_tokens`); the flag joins the vLLM command."""

from __future__ import annotations

import json
import re
from typing import Any

import click

from servefit.errors import InvalidArgumentError

_SIZE = re.compile(r"^\s*(\d+)\s*[xX*]\s*(\d+)\s*$")


def _image_size(ctx: Any, param: Any, value: str | None) -> tuple[int, int] | None:
    if value is None:
        return None
    match = _SIZE.match(value)
    if not match:
        raise click.BadParameter(f"{value!r}: give WIDTHxHEIGHT in pixels (1024x768)")
    return int(match.group(1)), int(match.group(2))


IMAGE_OPTIONS = [
    click.option(
        "--image-size",
        metavar="WxH",
        callback=_image_size,
        help="Each request carries images of this size: the model's processor turns them into "
        "prompt tokens and vision-encoder work (Qwen2/2.5/3-VL, Gemma 3, LLaVA 1.5).",
    ),
    click.option(
        "--images-per-request",
        type=click.IntRange(min=1),
        help="Images a request carries with --image-size [1].",
    ),
    click.option(
        "--mm-processor-kwargs",
        metavar="JSON",
        help="vLLM's processor overrides, e.g. '{\"max_pixels\": 1003520}' (Qwen-VL's pixel "
        "bounds); carried into the vLLM command.",
    ),
]


def pop_images(flags: dict[str, Any]) -> tuple[Any, tuple[str, ...]]:
    """(the images of each request or None, the vLLM flags they add to the command)."""
    from servefit.core.image_tokens import ImageWorkload

    size = flags.pop("image_size", None)
    per_request = flags.pop("images_per_request", None)
    kwargs_text = flags.pop("mm_processor_kwargs", None)
    if size is None:
        if per_request is not None or kwargs_text is not None:
            given = "--images-per-request" if per_request is not None else "--mm-processor-kwargs"
            raise InvalidArgumentError(f"{given} needs --image-size (the images' pixels)")
        return None, ()
    kwargs: dict[str, Any] = {}
    if kwargs_text is not None:
        try:
            kwargs = json.loads(kwargs_text)
        except json.JSONDecodeError as e:
            raise InvalidArgumentError(
                f"--mm-processor-kwargs is not JSON ({e.msg}): write it as "
                "'{\"max_pixels\": 1003520}'"
            ) from None
        if not isinstance(kwargs, dict):
            raise InvalidArgumentError("--mm-processor-kwargs must be a JSON object")
    images = ImageWorkload(
        width=size[0],
        height=size[1],
        per_request=per_request or 1,
        processor_kwargs=tuple(sorted(kwargs.items())),
    )
    from servefit.adapters.image_flags import image_vllm_args

    return images, image_vllm_args(images)
