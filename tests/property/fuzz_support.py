"""What the artifact fuzz tests share: ``benchmarks/fuzz_artifacts.py`` (its mutations, runs
and classes, one definition for the suite and the benchmark) and Hypothesis as its chooser,
so a failing case shrinks to its smallest mutation."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[2]


def load_fuzz_artifacts() -> Any:
    """``benchmarks/fuzz_artifacts.py`` (and through it ``benchmarks/fuzz.py``), once."""
    name = "servefit_fuzz_artifacts"
    if name not in sys.modules:
        path = ROOT / "benchmarks" / "fuzz_artifacts.py"
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses look their module up
        spec.loader.exec_module(module)
    return sys.modules[name]


class DrawChooser:
    """The mutator's randomness, drawn by Hypothesis."""

    def __init__(self, data: Any) -> None:
        self.data = data

    def choice(self, seq: Sequence[Any]) -> Any:
        return self.data.draw(st.sampled_from(list(seq)))

    def random(self) -> float:
        return self.data.draw(st.floats(0, 1, exclude_max=True))
