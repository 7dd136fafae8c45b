#!/usr/bin/env bash
# Install EleutherAI's lm-evaluation-harness (with its OpenAI-compatible API models) into
# <repo>/.venv-lmeval, for the tests of `servefit eval --harness lm-eval`: its score on the
# same server and items must equal servefit's own. Idempotent: a second run only checks.
#
#   scripts/lm_eval/install.sh                    # install / verify
#   LM_EVAL_VERSION=0.4.12 scripts/lm_eval/...    # another release (default 0.4.13)
#
# Its own environment: the harness pins datasets, pandas and scikit-learn, which servefit
# does not need, and servefit only runs its command line.
set -euo pipefail
cd "$(dirname "$0")/../.."

VENV=.venv-lmeval
LM_EVAL_VERSION="${LM_EVAL_VERSION:-0.4.13}"
PY="${PYTHON:-python3}"

if [ ! -x "$VENV/bin/python" ]; then
    "$PY" -m venv "$VENV"
    "$VENV/bin/python" -m pip install --quiet --upgrade pip
fi
have="$("$VENV/bin/python" -c "import importlib.metadata as m
try: print(m.version('lm_eval'))
except m.PackageNotFoundError: pass")"
if [ "$have" != "$LM_EVAL_VERSION" ]; then
    echo "[lm_eval/install.sh] installing lm_eval[api]==$LM_EVAL_VERSION (was: ${have:-none})"
    "$VENV/bin/python" -m pip install --quiet "lm_eval[api]==$LM_EVAL_VERSION"
fi
"$VENV/bin/lm_eval" --help >/dev/null
echo "[lm_eval/install.sh] lm_eval $LM_EVAL_VERSION in $VENV"
