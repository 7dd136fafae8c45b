"""``--speculative-config`` as text: vLLM's JSON object read into
:class:`~servefit.core.speculative.SpeculativeConfig` (the core takes the parsed object),
and written back compactly for the ``vllm serve`` line."""

from __future__ import annotations

import json
from typing import Any

from servefit.core.speculative import FLAG, SpeculativeConfig, parse_speculative_config
from servefit.errors import InvalidArgumentError


def read_speculative_config(
    given: str | dict[str, Any], vllm_version: str | None = None
) -> SpeculativeConfig:
    """A JSON text (the flag) or the dict vLLM printed (a start-up log, vLLM's own parser)."""
    if isinstance(given, str):
        try:
            obj = json.loads(given)
        except json.JSONDecodeError as e:
            raise InvalidArgumentError(
                f"{FLAG} is not JSON ({e.msg} at character {e.pos}): write it as "
                '\'{"method": "ngram", "num_speculative_tokens": 3}\''
            ) from None
    else:
        obj = given
    text = json.dumps(obj, separators=(",", ":")) if isinstance(obj, dict) else ""
    return parse_speculative_config(obj, vllm_version, given_json=text)
