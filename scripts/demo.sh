#!/usr/bin/env bash
# Set everything up (idempotent), then run rlscope-top on the built-in PPO/MuJoCo demo.
# Usage: sudo bash scripts/demo.sh [rlscope-top demo args, e.g. --headless --duration 10]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/rlscope-top demo "$@"
