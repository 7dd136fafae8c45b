"""Where the public fidelity corpus lives (``benchmarks/fidelity/``): the real vLLM start-up
logs and the published speed measurements that the golden tests hold servefit to and that
``benchmarks/fidelity.py`` scores."""

from __future__ import annotations

from pathlib import Path

FIDELITY_DIR = Path(__file__).resolve().parents[1] / "benchmarks" / "fidelity"
STARTUP_LOGS = FIDELITY_DIR / "startup_logs.json"
SPEED = FIDELITY_DIR / "speed.json"
