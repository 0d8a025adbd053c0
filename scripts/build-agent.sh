#!/usr/bin/env bash
# Build the GPU agent (probes/gpu_agent.c -> probes/librlscope_gpu.so) against the CUPTI
# headers of the nvidia-cuda-cupti wheel in .venv. Idempotent: rebuilds only when the
# source is newer. Usage: bash scripts/build-agent.sh [--force]
set -euo pipefail
cd "$(dirname "$0")/.."
say() { printf '[setup] %s\n' "$*" >&2; }
out=probes/librlscope_gpu.so
if [ "${1:-}" != "--force" ] && [ -f "$out" ] && [ "$out" -nt probes/gpu_agent.c ] && [ "$out" -nt probes/gpu_agent.h ]; then
  say "GPU agent up to date ($out)"; exit 0
fi
inc=$(.venv/bin/python - <<'PY'
import glob, os, nvidia
for base in nvidia.__path__:
    for d in sorted(glob.glob(os.path.join(base, "cu*", "include"))):
        if os.path.exists(os.path.join(d, "cupti_activity.h")) and os.path.exists(os.path.join(d, "crt", "host_defines.h")):
            print(d); raise SystemExit
raise SystemExit("no CUPTI headers: pip install nvidia-cuda-cupti nvidia-cuda-crt")
PY
) || { say "error: cannot build the GPU agent: $inc"; exit 5; }
tmp="$out.tmp.$$"
gcc -O2 -g -Wall -Wextra -fPIC -shared -fvisibility=hidden -I"$inc" -o "$tmp" probes/gpu_agent.c -ldl -lpthread
mv "$tmp" "$out"
say "built the GPU agent: $out (CUPTI headers from $inc)"
