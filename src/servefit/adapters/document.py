"""The base of every JSON document servefit writes (plan, compare, cost, report,
calibration), declared once as a frozen keyword-only dataclass.

Writing needs only the standard library (``servefit plan --json`` does not import pydantic:
its start-up is part of the answer's latency); reading a document back validates it with
pydantic, lazily, with unknown keys as errors (``extra="forbid"``). Non-finite floats are
written as ``null``, as pydantic writes them.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable
from typing import Any, ClassVar, Self, dataclass_transform

# Loaders of types a document module names only in annotations (imported lazily so that
# writing a document does not import them); reading any document runs them first, so
# pydantic can resolve every annotation.
_ANNOTATION_TYPE_LOADERS: list[Callable[[], None]] = []


def register_annotation_types(loader: Callable[[], None]) -> None:
    """``loader`` puts into its module the types that module annotates with but imports
    lazily; it runs before any document is read back."""
    _ANNOTATION_TYPE_LOADERS.append(loader)


def _load_annotation_types() -> None:
    for loader in _ANNOTATION_TYPE_LOADERS:
        loader()


@dataclass_transform(frozen_default=True, kw_only_default=True)  # type checkers see it too
class FrozenDoc:
    """Subclasses are made frozen, keyword-only dataclasses; the pydantic-style methods
    (``model_dump``, ``model_dump_json``, ``model_copy``, ``model_validate_json``) are the
    document API the rest of servefit uses."""

    # read by pydantic when a document is loaded (inherited by every document)
    __pydantic_config__: ClassVar[dict[str, str]] = {"extra": "forbid"}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        dataclasses.dataclass(frozen=True, kw_only=True)(cls)

    def model_dump(self) -> dict[str, Any]:
        return _plain(dataclasses.asdict(self))  # type: ignore[call-overload]

    def model_dump_json(self, *, indent: int | None = None) -> str:
        return json.dumps(self.model_dump(), indent=indent, allow_nan=False)

    def model_copy(self, *, update: dict[str, Any] | None = None) -> Self:
        return dataclasses.replace(self, **(update or {}))  # type: ignore[type-var]

    @classmethod
    def model_validate_json(cls, text: str | bytes) -> Self:
        """A document read back: types checked, unknown keys refused (pydantic's
        ``ValidationError``, a ``ValueError``)."""
        from pydantic import TypeAdapter

        _load_annotation_types()
        return TypeAdapter(cls).validate_json(text)

    @classmethod
    def model_validate(cls, data: Any) -> Self:
        from pydantic import TypeAdapter

        _load_annotation_types()
        return TypeAdapter(cls).validate_python(data)


def _plain(value: Any) -> Any:
    """JSON-ready values: non-finite floats as None, tuples as lists."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value
