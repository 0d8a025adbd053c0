#!/usr/bin/env bash
# Set everything up (idempotent), then run the whole test suite.
# Usage: sudo bash scripts/test.sh [pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m pytest -ra "$@"
