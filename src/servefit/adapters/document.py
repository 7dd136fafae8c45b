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
from typing import Any, ClassVar, Self


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

        return TypeAdapter(cls).validate_json(text)

    @classmethod
    def model_validate(cls, data: Any) -> Self:
        from pydantic import TypeAdapter

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
