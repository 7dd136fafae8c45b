"""The base of every JSON document servefit writes (plan, compare, cost, report,
calibration): frozen pydantic models whose unknown keys are errors."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class FrozenDoc(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
