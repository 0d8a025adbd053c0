#!/usr/bin/env bash
# Set everything up (idempotent), then run the whole test suite; prints its wall time.
# Usage: sudo bash scripts/test.sh [pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
start=$(date +%s)
rc=0
.venv/bin/python -m pytest -raR --durations=30 "$@" || rc=$?
echo "[test] wall time $(( $(date +%s) - start )) s (exit $rc)" >&2
exit $rc
