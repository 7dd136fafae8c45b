"""The exceptions servefit raises for things a user can fix.

::

    ServefitError                 root: the CLI prints "error (<label>): message" and exits 2
    ├── ConfigError               a model config (or quant config) we cannot interpret
    │   └── UnsupportedArchitectureError   an architecture we do not understand (names the fields)
    ├── ModelNotFoundError        not a path, not in the catalog, not on the Hub
    │   └── HubError              the Hub could not answer (offline, gated, unreachable)
    ├── UnknownGpuError           a GPU name not in the catalog (with close-name suggestions)
    ├── InvalidArgumentError      a flag value that cannot be right (negative length, TP that
    │                             does not divide the heads, ...)
    ├── DatasetError              a benchmark dataset (JSONL) that cannot be read
    ├── ServerError               the server under test is unreachable or not OpenAI-compatible
    ├── CalibrationError          the device cannot be measured (no PyTorch, no such device)
    ├── MonitorError              NVML is unavailable (no NVIDIA driver) or failed
    └── HistoryError              the run history database cannot be used (damaged, newer
                                  schema, unwritable): names the file and what to do

A plan that does not fit is not an error: it is a result whose verdict says so (exit 1).
Anything else that escapes is a servefit bug: the CLI exits with its own code (3).
"""

from __future__ import annotations


class ServefitError(Exception):
    """Root of every error a user can act on."""

    label = "servefit"  # what kind of input to fix, in the CLI's "error (<label>): ..." line


class ConfigError(ServefitError):
    """A model or quantization config that servefit cannot interpret."""

    label = "model config"


class UnsupportedArchitectureError(ConfigError):
    """An architecture servefit does not understand; never silently treated as dense."""

    label = "unsupported architecture"


class ModelNotFoundError(ServefitError):
    """A model id that is neither a path, nor in the catalog, nor a Hub repository."""

    label = "model not found"


class HubError(ModelNotFoundError):
    """The Hugging Face Hub could not answer: offline and not cached, gated, unreachable."""

    label = "Hugging Face Hub"


class UnknownGpuError(ServefitError):
    """A GPU name the hardware catalog does not know."""

    label = "unknown GPU"


class InvalidArgumentError(ServefitError):
    """A flag or argument value that cannot be right."""

    label = "invalid argument"


class DatasetError(ServefitError):
    """A benchmark dataset that cannot be read or holds no usable request."""

    label = "dataset"


class ServerError(ServefitError):
    """The server under test cannot be reached or does not speak the OpenAI API."""

    label = "server"


class CalibrationError(ServefitError):
    """The device could not be measured (no PyTorch, no such device, out of memory)."""

    label = "calibration"


class MonitorError(ServefitError):
    """NVML is unavailable (no NVIDIA driver) or failed."""

    label = "GPU monitor"


class HistoryError(ServefitError):
    """The run history database is damaged, from a newer servefit, or cannot be written."""

    label = "history database"
