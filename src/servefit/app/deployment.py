"""One deployment, described once: the model, the hardware, the engine and its settings, the
workload and what the user holds it to. Every use case (plan, compare, cost, report, scaling)
takes a :class:`Deployment`; the CLI builds one from flags or from a ``vllm serve`` line.

The two kinds of "concurrency" are kept apart:

- ``workload.concurrency`` is the workload's requests in flight (a closed loop of users, or
  the client cap of an open loop); the verdict checks that those requests, at their own
  lengths, run;
- ``target`` is an explicit capacity question (``--context N [--target-concurrency M]``):
  can M requests of N tokens be held at once? Without it, capacity at max-model-len is
  reported, not judged.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from servefit.core.image_tokens import ImageLoad, ImageWorkload
from servefit.core.plan import ServeSettings
from servefit.core.workload import Slo, Workload, fixed_workload
from servefit.errors import InvalidArgumentError

DEFAULT_INPUT_LEN = 1024
DEFAULT_OUTPUT_LEN = 256


@dataclass(frozen=True, slots=True, kw_only=True)
class Hardware:
    """A catalog GPU by name, a custom device (memory and bandwidth), or both (a catalog GPU
    with its memory or bandwidth overridden); ``calibration_path`` adds measured efficiency."""

    gpu: str | None = None
    memory_gib: float | None = None
    bandwidth_gb_per_s: float | None = None
    calibration_path: str | None = None

    def __post_init__(self) -> None:
        if self.gpu is not None and not self.gpu.strip():
            raise InvalidArgumentError("--gpu is empty: name a GPU (see `servefit gpus`)")
        for flag, value in (
            ("--gpu-memory-gib", self.memory_gib),
            ("--gpu-bandwidth-gbps", self.bandwidth_gb_per_s),
        ):
            if value is not None and not (0 < value < float("inf")):
                raise InvalidArgumentError(f"{flag} must be a positive finite number, got {value}")


@dataclass(frozen=True, slots=True, kw_only=True)
class CapacityTarget:
    """``--context N`` (and ``--target-concurrency M``): M requests of N tokens held at once."""

    context_tokens: int
    concurrency: int = 1

    def __post_init__(self) -> None:
        if self.context_tokens < 1:
            raise InvalidArgumentError(f"--context must be >= 1, got {self.context_tokens}")
        if self.concurrency < 1:
            raise InvalidArgumentError(f"--target-concurrency must be >= 1, got {self.concurrency}")


@dataclass(frozen=True, slots=True, kw_only=True)
class Deployment:
    """Everything that decides the answer, and nothing else."""

    model: str  # a Hugging Face id, a config.json or a model directory
    hardware: Hardware
    settings: ServeSettings = field(default_factory=ServeSettings)  # vLLM's flags
    workload: Workload = field(
        default_factory=lambda: default_workload(concurrency=1, request_rate_per_s=None)
    )
    is_workload_given: bool = False  # the user described the workload: the verdict judges it
    target: CapacityTarget | None = None
    slo: Slo | None = None
    engine: str | None = None  # None: the engine that runs on this hardware
    gguf: str | None = None  # plan the checkpoint as a GGUF file of this llama.cpp type
    revision: str | None = None
    allow_hub: bool = True
    extra_args: tuple[str, ...] = ()  # engine flags servefit does not model, carried verbatim
    # --acceptance-rate: the share of drafted tokens kept under --speculative-config (None:
    # the method's published figure, data/acceptance.toml)
    acceptance_rate: float | None = None
    acceptance_from: str | None = None  # --acceptance-from: a bench run that measured it
    # --image-size / --images-per-request: each request's images; once resolved against the
    # model, ``image_load`` holds their tokens (already in the workload's input length) and
    # the encoder's FLOPs
    images: ImageWorkload | None = None
    image_load: ImageLoad | None = None

    def engine_settings(self) -> ServeSettings:
        """The settings the capacity model sees: the flags, plus the explicit target."""
        if self.target is None:
            return replace(self.settings, concurrency=None, context_tokens=None)
        return replace(
            self.settings,
            concurrency=self.target.concurrency,
            context_tokens=self.target.context_tokens,
        )

    def describe_workload(self) -> str:
        """The workload as given: its text tokens and, apart, the images each request
        carries (a settled deployment's input length holds their tokens already)."""
        text = self.workload.describe()
        if self.images is None:
            return text
        held = " (their tokens included)" if self.image_load is not None else ""
        return f"{text}, {self.images.describe()}{held}"

    def with_settings(self, settings: ServeSettings) -> Deployment:
        return replace(self, settings=settings)


def default_workload(
    *,
    input_len: int = DEFAULT_INPUT_LEN,
    output_len: int = DEFAULT_OUTPUT_LEN,
    concurrency: int | None,
    request_rate_per_s: float | None,
    prefix_len: int = 0,
    turns: int = 1,
    range_ratio: float = 0.0,
    num_requests: int | None = None,
    requests: Sequence[tuple[int, int, float | None]] = (),
) -> Workload:
    """A workload from the CLI's flags. An open loop (a rate) without ``concurrency`` has no
    client cap, as ``vllm bench serve --request-rate`` without ``--max-concurrency``.
    ``requests`` (``--dataset``): a trace's (prompt, output, arrival) requests, simulated as
    they are; a trace with arrival times and neither a concurrency nor a rate is replayed."""
    if requests:
        from servefit.core.workload import LengthDist, RequestSpec

        specs = tuple(RequestSpec(arrival_s=a, input_len=i, output_len=o) for i, o, a in requests)
        timed = all(a is not None for _, _, a in requests)
        if concurrency is None and request_rate_per_s is None and not timed:
            concurrency = 1
        mean_in = max(1, round(sum(r.input_len for r in specs) / len(specs)))
        mean_out = max(1, round(sum(r.output_len for r in specs) / len(specs)))
        base = fixed_workload(mean_in, mean_out, concurrency=concurrency or 1)
        return replace(
            base,
            input_len=LengthDist(mean=mean_in),
            output_len=LengthDist(mean=mean_out),
            concurrency=concurrency,
            request_rate_per_s=request_rate_per_s,
            num_requests=num_requests,
            prefix_len=prefix_len,
            turns=turns,
            requests=specs,
        )
    if concurrency is None and request_rate_per_s is None:
        concurrency = 1
    return fixed_workload(
        input_len,
        output_len,
        concurrency=concurrency,
        request_rate_per_s=request_rate_per_s,
        num_requests=num_requests,
        prefix_len=prefix_len,
        turns=turns,
        range_ratio=range_ratio,
    )


def longest_request_tokens(w: Workload) -> int:
    """The most tokens one request of the workload holds (:meth:`Workload.longest_request_
    tokens`)."""
    return w.longest_request_tokens()


def deployment_from_vllm_command(
    args: list[str],
    *,
    hardware: Hardware,
    workload: Workload | None = None,
    target: CapacityTarget | None = None,
    allow_hub: bool = True,
) -> Deployment:
    """The deployment a ``vllm serve ...`` line launches (read by servefit's offline reader):
    its model, the flags servefit models as settings, every other flag carried verbatim."""
    from servefit.preflight.vllm_args import parse_vllm_command

    parsed = parse_vllm_command(args)
    return Deployment(
        model=parsed.model,
        hardware=hardware,
        settings=ServeSettings(**parsed.settings),
        workload=workload or default_workload(concurrency=1, request_rate_per_s=None),
        is_workload_given=workload is not None,
        target=target,
        allow_hub=allow_hub,
        extra_args=parsed.extra_args,
    )
