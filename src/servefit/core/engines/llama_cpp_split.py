"""Where llama.cpp puts each layer: GPUs by ``--tensor-split``, the host for what ``-ngl``
leaves out.

llama.cpp splits a model over its GPUs by whole layers (``--split-mode layer``, the
default), as ``llama_model::load_tensors`` (src/llama-model.cpp, read at ggml-org/llama.cpp
a5410f0) assigns them:

- the split points are the devices' shares, summed and normalised: ``--tensor-split A,B``
  as given, or by default each device's free memory (identical, empty GPUs: equal shares);
- ``-ngl N`` offloads the last N of the ``n_layer + 1`` layers, the output layer (final
  norm and LM head) counted as layer ``n_layer``: ``i_gpu_start = max(n_layer + 1 - N, 0)``,
  ``act = min(N, n_layer + 1)``; the layers below ``i_gpu_start`` stay in host memory;
- offloaded layer ``il`` goes to the first device whose split point exceeds
  ``(il - i_gpu_start) / act`` (``std::upper_bound``);
- the input layer (the token embedding) always stays in host memory ("there is very little
  benefit to offloading the input layer"); a tied LM head is a duplicate of it on the
  output layer's device;
- each layer's KV cache lives where the layer does (src/llama-kv-cache.cpp, with the
  default ``--kv-offload``).

Worked example (64 layers, two equal GPUs, ``-ngl 99``): split points 0.5 and 1.0 over 65
layers; layer 32 sits at 32/65 = 0.49 (GPU 0), layer 33 at 0.51 (GPU 1), the output layer
at 64/65 (GPU 1): GPU 0 holds layers 0-32, GPU 1 layers 33-63 and the LM head.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from fractions import Fraction

from servefit.core.model_spec import ModelSpec
from servefit.core.weight_inventory import Role
from servefit.core.weight_layers import weight_tensors
from servefit.core.weights import tensor_bytes
from servefit.errors import InvalidArgumentError

HOST = -1  # the device index of host memory (layers -ngl leaves out, the input embedding)


@dataclass(frozen=True, slots=True, kw_only=True)
class Placement:
    """The device of every decoder layer and of the output layer (:data:`HOST` for host
    memory), over ``num_devices`` GPUs."""

    num_devices: int
    layer_devices: tuple[int, ...]
    output_device: int

    def device_layers(self, device: int) -> range:
        """The decoder layers ``device`` holds (contiguous; empty when none)."""
        held = [i for i, d in enumerate(self.layer_devices) if d == device]
        return range(held[0], held[-1] + 1) if held else range(0)

    @property
    def host_layers(self) -> range:
        return self.device_layers(HOST)


def placement(
    num_layers: int,
    num_devices: int,
    *,
    tensor_split: tuple[float, ...] | None = None,
    n_gpu_layers: int | None = None,
) -> Placement:
    """llama.cpp's assignment of ``num_layers`` decoder layers and the output layer to
    ``num_devices`` GPUs (``n_gpu_layers`` None: all of them, as ``-ngl 99``)."""
    if num_devices < 1:
        raise InvalidArgumentError(f"llama.cpp needs at least one device, got {num_devices}")
    shares = _shares(num_devices, tensor_split)
    points, total = [], Fraction(0)
    for share in shares:
        total += share
        points.append(total)
    points = [p / total for p in points]
    ngl = num_layers + 1 if n_gpu_layers is None else n_gpu_layers
    if ngl < 0:
        raise InvalidArgumentError(f"--n-gpu-layers must be >= 0, got {ngl}")
    start = max(num_layers + 1 - ngl, 0)
    active = min(ngl, num_layers + 1)

    def device_of(layer: int) -> int:
        if layer < start or layer - start >= active:
            return HOST
        return bisect_right(points, Fraction(layer - start, active))

    return Placement(
        num_devices=num_devices,
        layer_devices=tuple(device_of(i) for i in range(num_layers)),
        output_device=device_of(num_layers),
    )


def _shares(num_devices: int, tensor_split: tuple[float, ...] | None) -> list[Fraction]:
    """Each device's share: ``--tensor-split`` (one value a device), or equal (the default
    split by free memory, on identical empty GPUs)."""
    if tensor_split is None or not any(tensor_split):
        return [Fraction(1)] * num_devices
    if len(tensor_split) != num_devices:
        raise InvalidArgumentError(
            f"--tensor-split has {len(tensor_split)} values for {num_devices} GPUs: give one "
            "share per GPU"
        )
    if any(x < 0 for x in tensor_split):
        raise InvalidArgumentError(f"--tensor-split shares must be >= 0, got {tensor_split}")
    return [Fraction(x) for x in tensor_split]


@dataclass(frozen=True, slots=True, kw_only=True)
class DeviceWeights:
    """Weight bytes on each GPU and in host memory under a :class:`Placement`."""

    device_bytes: tuple[float, ...]
    host_bytes: float


def device_weights(spec: ModelSpec, where: Placement) -> DeviceWeights:
    """The GGUF's tensors where llama.cpp loads them: decoder layers with their layer, the
    token embedding in host memory, the final norm and LM head (or, tied, a copy of the
    embedding) on the output layer's device; MTP and vision tensors are not loaded."""
    per_device = [0.0] * where.num_devices
    host = 0.0
    if spec.file_tensors:
        return _file_weights(spec, where)

    def add(device: int, num_bytes: float) -> None:
        nonlocal host
        if device == HOST:
            host += num_bytes
        else:
            per_device[device] += num_bytes

    for t in weight_tensors(spec):
        if t.role in (Role.MTP, Role.VISION):
            continue
        size = tensor_bytes(spec, t)
        if t.layer_index is not None:
            add(where.layer_devices[t.layer_index], size)
        elif t.role is Role.EMBEDDING:
            add(HOST, size)
            if spec.tie_word_embeddings:  # the output layer's duplicate (TENSOR_DUPLICATED)
                add(where.output_device, size)
        else:  # final norm, LM head
            add(where.output_device, size)
    return DeviceWeights(device_bytes=tuple(per_device), host_bytes=host)


EMBEDDING_TENSOR = "token_embd.weight"  # llama.cpp's name of the input embedding
OUTPUT_TENSOR = "output.weight"  # ... and of an untied LM head


def _file_weights(spec: ModelSpec, where: Placement) -> DeviceWeights:
    """A GGUF file's own tensor bytes where llama.cpp puts them: ``blk.N.`` with layer N, the
    token embedding on the host (and, with no ``output.weight``, a copy on the output layer's
    device), every other tensor (``output_norm``, ``output``, ``rope_freqs``) on the output
    layer's device."""
    per_device = [0.0] * where.num_devices
    host = 0.0
    tied = not any(t.name == OUTPUT_TENSOR for t in spec.file_tensors)
    for t in spec.file_tensors:
        targets = (
            [where.layer_devices[t.layer]]
            if t.layer is not None and t.layer < len(where.layer_devices)
            else [HOST, where.output_device]
            if t.name == EMBEDDING_TENSOR and tied
            else [HOST]
            if t.name == EMBEDDING_TENSOR
            else [where.output_device]
        )
        for device in targets:
            if device == HOST:
                host += t.num_bytes
            else:
                per_device[device] += t.num_bytes
    return DeviceWeights(device_bytes=tuple(per_device), host_bytes=host)
