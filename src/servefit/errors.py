"""The exceptions servefit raises for things a user can fix.

::

    ServefitError                 root: the CLI catches this, prints "Type: message", exits 2
    ├── ConfigError               a model config (or quant config) we cannot interpret
    │   └── UnsupportedArchitectureError   an architecture we do not understand (names the fields)
    ├── ModelNotFoundError        not in the catalog, not a path, and the Hub is unreachable
    ├── UnknownGpuError           a GPU name not in the catalog (with close-name suggestions)
    ├── InvalidArgumentError      a flag value that cannot be right (negative length, TP that
    │                             does not divide the heads, ...)
    ├── CalibrationError          the device cannot be measured (no PyTorch, no such device)
    └── MonitorError              NVML is unavailable (no NVIDIA driver) or failed

A plan that does not fit is not an error: it is a result with ``fits=False`` (exit code 1).
"""

from __future__ import annotations


class ServefitError(Exception):
    """Root of every error a user can act on."""


class ConfigError(ServefitError):
    """A model or quantization config that servefit cannot interpret."""


class UnsupportedArchitectureError(ConfigError):
    """An architecture servefit does not understand; never silently treated as dense."""


class ModelNotFoundError(ServefitError):
    """A model id that is neither a path, nor in the catalog, nor reachable on the Hub."""


class UnknownGpuError(ServefitError):
    """A GPU name the hardware catalog does not know."""


class InvalidArgumentError(ServefitError):
    """A flag or argument value that cannot be right."""


class CalibrationError(ServefitError):
    """The device could not be measured (no PyTorch, no such device, out of memory)."""


class MonitorError(ServefitError):
    """NVML is unavailable (no NVIDIA driver) or failed."""
