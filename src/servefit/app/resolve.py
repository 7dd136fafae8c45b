"""From a :class:`Deployment` to the things the core computes on: the model spec, the GPU,
the efficiency profile. The only place the use cases touch files, the catalog or the Hub."""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from servefit.adapters.catalog import efficiency_table, find_gpu
from servefit.adapters.model_source import LoadedModel, load_model
from servefit.app.deployment import Deployment, Hardware
from servefit.core.engines import ServingEngine, select_engine
from servefit.core.hardware import GpuSpec, custom_gpu
from servefit.core.speculative import Acceptance, DraftNetwork
from servefit.errors import InvalidArgumentError, ModelNotFoundError
from servefit.units import GB_BYTES, GIB_BYTES

if TYPE_CHECKING:
    from servefit.calibrate.profile import CalibrationDocument
    from servefit.core.model_spec import ModelSpec
    from servefit.core.roofline import EfficiencyProfile


# --gpu names that mean "the hardware of this machine" (detected), not a catalog entry
DETECTED_NAMES = frozenset({"auto", "cpu", "host", "host-cpu"})


# The smallest device servefit plans: no accelerator vLLM, llama.cpp or MLX serves an LLM on
# has less than 1 GiB (the smallest CUDA 12 boards carry 2 GB), and an NVIDIA driver keeps
# ~0.5 GiB of any card for itself (engine.DRIVER_RESERVED_BYTES).
MIN_DEVICE_MEMORY_GIB = 1.0
MIN_DEVICE_BANDWIDTH_GB_PER_S = 1.0  # below a 2000s PCIe link: a typo, not a device


def _check_described(hw: Hardware) -> None:
    """A device described by flags is one that could serve a model, or a clear error."""
    if hw.memory_gib is not None and not hw.memory_gib >= MIN_DEVICE_MEMORY_GIB:
        raise InvalidArgumentError(
            f"--gpu-memory-gib {hw.memory_gib:g}: not a GPU's memory; give it in GiB "
            f"(at least {MIN_DEVICE_MEMORY_GIB:g}: 24 for a 24 GB card, 80 for an H100)"
        )
    if hw.bandwidth_gb_per_s is not None and not (
        hw.bandwidth_gb_per_s >= MIN_DEVICE_BANDWIDTH_GB_PER_S
    ):
        raise InvalidArgumentError(
            f"--gpu-bandwidth-gbps {hw.bandwidth_gb_per_s:g}: not a GPU's memory bandwidth; "
            f"give it in GB/s (at least {MIN_DEVICE_BANDWIDTH_GB_PER_S:g}: 3350 for an H100)"
        )


def resolve_gpu(hw: Hardware, calibration: CalibrationDocument | None = None) -> GpuSpec:
    """The catalog GPU, a custom one, this machine's (``--gpu auto``, ``--gpu cpu``), or
    (with only a calibration) the measured device."""
    if hw.gpu is None and hw.memory_gib is None:
        if calibration is not None:
            from servefit.calibrate.profile import calibrated_device

            return calibrated_device(calibration)
        raise InvalidArgumentError(
            "name a GPU with --gpu (see `servefit gpus`) or describe one with "
            "--gpu-memory-gib and --gpu-bandwidth-gbps"
        )
    if hw.gpu is not None and hw.gpu.strip().lower() in DETECTED_NAMES:
        from servefit.adapters.detect import detect

        return detect(hw.gpu).device  # this machine: NVIDIA GPUs through NVML, or its CPU
    _check_described(hw)
    base = find_gpu(hw.gpu) if hw.gpu else None
    if base is not None and hw.memory_gib is None and hw.bandwidth_gb_per_s is None:
        return base
    if base is None:
        if hw.memory_gib is None or hw.bandwidth_gb_per_s is None:
            raise InvalidArgumentError(
                "a custom GPU needs both --gpu-memory-gib and --gpu-bandwidth-gbps"
            )
        memory, bandwidth = int(hw.memory_gib * GIB_BYTES), hw.bandwidth_gb_per_s * GB_BYTES
    else:
        memory = int(hw.memory_gib * GIB_BYTES) if hw.memory_gib else base.memory_bytes
        bandwidth = (
            hw.bandwidth_gb_per_s * GB_BYTES
            if hw.bandwidth_gb_per_s
            else base.memory_bandwidth_bytes_per_s
        )
    return custom_gpu(memory_bytes=memory, memory_bandwidth_bytes_per_s=bandwidth, base=base)


@dataclass(frozen=True, slots=False, kw_only=True)
class Resolved:
    """A deployment's model, GPU and (optional) calibration, loaded once."""

    deployment: Deployment
    loaded: LoadedModel
    gpu: GpuSpec
    calibration: CalibrationDocument | None
    engine: ServingEngine  # the engine that serves it there (refusals raised on resolve)
    draft: DraftNetwork | None = None  # the --speculative-config draft checkpoint, loaded
    measured_acceptance: Acceptance | None = None  # --acceptance-from's bench run, read

    @property
    def model_id(self) -> str:
        return self.loaded.spec.name

    def profile(self, engine: str | None = None) -> EfficiencyProfile:
        """The efficiency profile for this GPU and engine, with the calibration's hardware
        factors when one was given."""
        return self._profiles(engine or self.deployment.engine)

    def _profiles(self, engine: str | None) -> EfficiencyProfile:
        cache = self._profile_cache
        if engine not in cache:
            profile = efficiency_table().for_gpu(self.gpu, engine)
            if self.calibration is not None:
                from servefit.calibrate.profile import calibrated_profile, check_matches

                check_matches(self.calibration, self.gpu)
                profile = calibrated_profile(
                    self.calibration, profile, self.deployment.hardware.calibration_path or ""
                )
            cache[engine] = profile
        return cache[engine]

    @cached_property
    def _profile_cache(self) -> dict[str | None, EfficiencyProfile]:
        return {}


def load_calibration_for(hw: Hardware) -> CalibrationDocument | None:
    if hw.calibration_path is None:
        return None
    from servefit.calibrate.profile import load_calibration

    return load_calibration(Path(hw.calibration_path))


def resolve(
    d: Deployment, *, loaded: LoadedModel | None = None, gpu: GpuSpec | None = None
) -> Resolved:
    """Load the model (path, catalog, Hub) and find the GPU. ``loaded`` reuses a model
    already loaded (compare plans one model on several GPUs); ``gpu`` a device already
    resolved from ``d.hardware`` (``fit`` plans every model on one detected machine)."""
    calibration = load_calibration_for(d.hardware)
    if gpu is None:
        gpu = resolve_gpu(d.hardware, calibration)
    if loaded is None:
        loaded = load_model(d.model, revision=d.revision, allow_hub=d.allow_hub)
    d = settled(d, loaded)
    if d.gguf is not None:
        if loaded.spec.file_tensors:
            raise InvalidArgumentError(
                f"--gguf {d.gguf}: {d.model} is a GGUF file already, of its own type; drop "
                "--gguf (quantize the file with llama-quantize for another type)"
            )
        loaded = as_gguf(loaded, d.gguf)
    engine = select_engine(d.engine, gpu, loaded.spec)
    for flag, value in (
        ("--tensor-split", d.settings.tensor_split),
        ("--n-gpu-layers", d.settings.n_gpu_layers),
    ):
        if value is not None and engine.name != "llama.cpp":
            raise InvalidArgumentError(
                f"{flag} is llama.cpp's; {engine.name} does not take it (drop it, or plan a "
                "GGUF with --engine llama.cpp)"
            )
    return Resolved(
        deployment=d,
        loaded=loaded,
        gpu=gpu,
        calibration=calibration,
        engine=engine,
        draft=load_draft(d),
        measured_acceptance=_measured_acceptance(d),
    )


def _measured_acceptance(d: Deployment) -> Acceptance | None:
    if d.acceptance_from is None:
        return None
    from servefit.adapters.acceptance import acceptance_from_run

    return acceptance_from_run(d.acceptance_from)


def load_draft(d: Deployment) -> DraftNetwork | None:
    """The draft checkpoint ``--speculative-config`` names (an EAGLE head or a draft
    model), its config read as the target's is (path, catalog, Hub); None when the
    proposer needs none (n-gram, suffix, the checkpoint's own MTP layers)."""
    sc = d.settings.speculative
    if sc is None or not sc.method.needs_draft_config or sc.model is None:
        return None
    from servefit.core.speculative import FLAG

    try:
        draft = load_model(sc.model, revision=None, allow_hub=d.allow_hub)
    except (InvalidArgumentError, ModelNotFoundError) as exc:
        raise InvalidArgumentError(f"{FLAG} model {sc.model!r}: {exc}") from None
    return DraftNetwork(spec=draft.spec, draft_vocab_size=draft.draft_vocab_size)


def as_gguf(loaded: LoadedModel, kind: str) -> LoadedModel:
    """The checkpoint as llama.cpp's converter and quantizer would write it in GGUF type
    ``kind`` (:func:`servefit.core.quant_spec.gguf_quant`)."""
    from dataclasses import replace

    from servefit.core.quant_spec import gguf_quant
    from servefit.errors import ConfigError

    try:
        quant = gguf_quant(kind)
    except ConfigError as exc:
        raise InvalidArgumentError(f"--gguf {kind}: {exc}") from None
    spec = replace(loaded.spec, quant=quant)
    return replace(loaded, spec=spec)


def settled(d: Deployment, loaded: LoadedModel) -> Deployment:
    """``d`` with what only its model decides: an Ollama model's num_ctx as the context when
    none is given, and each request's images as the tokens the model's processor makes of
    them. Idempotent, so every deployment planned on one resolved model is settled alike
    (compare's cells, the layout search's layouts)."""
    if loaded.origin == "ollama" and d.settings.max_model_len is None:
        if loaded.default_max_model_len is None:
            raise InvalidArgumentError(
                f"{d.model}: Ollama serves it at its num_ctx, which its params do not set "
                "(Ollama's default depends on its release and the GPU): give --max-model-len, "
                "the num_ctx you run it with"
            )
        d = d.with_settings(replace(d.settings, max_model_len=loaded.default_max_model_len))
    if d.images is not None and d.image_load is None:
        d = with_images(d, loaded.spec)
    return d


def with_images(d: Deployment, spec: ModelSpec) -> Deployment:
    """``d`` with its images counted by the model's processor rule: their tokens join each
    prompt (the KV cache and the prefill see them), the encoder's FLOPs are kept for TTFT."""
    from servefit.core.image_tokens import image_load
    from servefit.core.workload import LengthDist

    assert d.images is not None
    if d.workload.requests:
        raise InvalidArgumentError(
            "--image-size with --dataset: a dataset's lines give token counts; add the image "
            "tokens to them, or plan the lengths with --input-len"
        )
    load = image_load(spec.vision, d.images, d.model)
    w = d.workload
    grown = LengthDist(
        mean=w.input_len.mean + load.tokens_per_request, range_ratio=w.input_len.range_ratio
    )
    return replace(d, workload=replace(w, input_len=grown), image_load=load)
