"""JSON text for the wire and for `-o json` that every parser accepts (browsers' JSON.parse too)."""

from __future__ import annotations

import json
import math
from typing import Any


def dumps_strict(data: Any, **kwargs: Any) -> str:
    """``json.dumps`` with NaN/Infinity (e.g. from a record an older version stored) as null.

    Python writes them as bare ``NaN``, which is not JSON: one such value in the job list
    would break the list for every client.
    """
    try:
        return json.dumps(data, allow_nan=False, **kwargs)
    except ValueError:  # rare: walk and replace only when the fast path refused
        return json.dumps(_finite(data), allow_nan=False, **kwargs)


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value
