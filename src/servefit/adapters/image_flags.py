"""The images of a workload as ``vllm serve`` flags: ``--mm-processor-kwargs`` as the user
gave it (compact JSON) and ``--limit-mm-per-prompt`` when a request carries more than one
image. One source for the CLI and the page."""

from __future__ import annotations

import json

from servefit.core.image_tokens import ImageWorkload


def image_vllm_args(images: ImageWorkload | None) -> tuple[str, ...]:
    """The ``vllm serve`` flags ``images`` need (none without images)."""
    if images is None:
        return ()
    args: tuple[str, ...] = ()
    if images.processor_kwargs:
        given = json.dumps(dict(images.processor_kwargs), separators=(",", ":"))
        args += ("--mm-processor-kwargs", given)
    if images.per_request > 1:
        args += ("--limit-mm-per-prompt", json.dumps({"image": images.per_request}))
    return args
