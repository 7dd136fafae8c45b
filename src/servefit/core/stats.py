"""Order statistics shared by predictions and measurements."""

from __future__ import annotations

import math
from collections.abc import Sequence


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default method)."""
    if not sorted_values:
        raise ValueError("percentile of an empty sequence")
    position = (len(sorted_values) - 1) * q / 100
    low = math.floor(position)
    high = math.ceil(position)
    fraction = position - low
    below, above = sorted_values[low], sorted_values[high]
    if below == above:  # two infinities too, whose difference would make it NaN
        return below
    return below + (above - below) * fraction
