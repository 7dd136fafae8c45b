"""What a deployment's optional parts add to its capacity plan: the drafter of
``--speculative-config`` (:mod:`servefit.core.drafter`) and the LoRA slots of
``--enable-lora`` (:mod:`servefit.core.lora`). ``plan_capacity`` calls :func:`plan_effect`
once; without either part it changes nothing."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from servefit.core import drafter
from servefit.core.kv_cache import CacheSettings
from servefit.core.lora import lora_bytes_per_gpu
from servefit.core.model_spec import ModelSpec
from servefit.core.speculative import (
    FLAG,
    DraftNetwork,
    check_draft_tensor_parallel,
    check_release,
)
from servefit.errors import InvalidArgumentError
from servefit.units import GIB_BYTES

if TYPE_CHECKING:
    from servefit.core.engine import VllmBehaviour
    from servefit.core.hardware import GpuSpec
    from servefit.core.plan_settings import ResolvedSettings


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanEffect:
    """What the optional parts change in a capacity plan: the layers vLLM groups (the
    target's, then the drafter's), the bytes they add on one GPU of the last stage (the
    drafter's weights, the LoRA slots), the cache settings (state blocks and conv steps),
    and the plan's notes on them."""

    cache_spec: ModelSpec
    weight_bytes: float
    cache: CacheSettings
    notes: tuple[str, ...]


def plan_effect(
    spec: ModelSpec,
    r: ResolvedSettings,
    draft: DraftNetwork | None,
    behaviour: VllmBehaviour,
    gpu: GpuSpec,
    cache: CacheSettings,
    has_state: bool,
) -> PlanEffect:
    """The drafter of ``r.speculative`` and the LoRA slots of ``r.lora`` in a plan."""
    lora_bytes = 0.0
    lora_notes: tuple[str, ...] = ()
    if r.lora is not None:
        if r.pipeline_parallel_size > 1:
            raise InvalidArgumentError(
                "--enable-lora with --pipeline-parallel-size: servefit plans LoRA slots on one "
                "pipeline stage only"
            )
        lora_bytes = float(lora_bytes_per_gpu(spec, r.lora, r.tensor_parallel_size))
        lora_notes = (
            f"LoRA: {r.lora.describe()} in every linear layer, the embedding and the LM head: "
            f"{lora_bytes / GIB_BYTES:.2f} GiB per GPU, allocated at load (the adapters' "
            "kernels' step time is not modelled)",
        )
    sc = r.speculative
    if sc is None:
        return PlanEffect(cache_spec=spec, weight_bytes=lora_bytes, cache=cache, notes=lora_notes)
    if r.pipeline_parallel_size > 1:
        raise InvalidArgumentError(
            f"{FLAG} with --pipeline-parallel-size {r.pipeline_parallel_size}: servefit plans "
            "speculative decoding on one pipeline stage only"
        )
    check_release(sc, behaviour.version)
    tp = r.tensor_parallel_size
    check_draft_tensor_parallel(sc, tp)
    layers = drafter.cache_layers(spec, sc, draft)
    bytes_per_gpu = drafter.weight_bytes_per_gpu(
        spec,
        sc,
        draft,
        tp=tp,
        capability=gpu.compute_capability_tuple,
        has_triton_kernels=behaviour.ships_triton_kernels,
    )
    return PlanEffect(
        cache_spec=drafter.with_drafter_layers(spec, layers),
        weight_bytes=bytes_per_gpu + lora_bytes,
        cache=replace(cache, speculative_tokens=sc.k if has_state else 0),
        notes=(*drafter.notes(sc, bytes_per_gpu, len(layers)), *lora_notes),
    )
