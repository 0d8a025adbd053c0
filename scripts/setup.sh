#!/usr/bin/env bash
# Idempotent setup for a fresh Debian machine: bcc, kernel headers, tracefs, .venv.
# Usage: sudo bash scripts/setup.sh            (quiet where it can be)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
say() { printf '[setup] %s\n' "$*" >&2; }

if [ "$(id -u)" != 0 ]; then
  if command -v sudo >/dev/null; then exec sudo -E bash "$0" "$@"; fi
  say "error: run as root (eBPF needs CAP_BPF/CAP_PERFMON); hint: sudo bash scripts/setup.sh"; exit 2
fi

# 1. Debian packages: bcc's Python module, its tools, kernel headers, tmux for the TUI tests,
#    and a Prometheus server the exporter's test scrapes with (its service is not started).
need=()
for p in python3-bpfcc bpfcc-tools bpftool linux-headers-amd64 python3-venv tmux gcc prometheus; do
  dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  say "installing Debian packages: ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  held=""
  if [ ! -e /usr/sbin/policy-rc.d ]; then   # install services without starting them
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d && held=1
  fi
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  if [ -n "$held" ]; then rm -f /usr/sbin/policy-rc.d; fi
else
  say "Debian packages present"
fi

# 2. Kernel headers: the running kernel may have no matching package; uprobe programs use
#    only stable user-ABI structs (pt_regs), so the distribution's headers are enough.
KDIR=/lib/modules/$(uname -r)
if [ ! -e "$KDIR/build/Makefile" ]; then
  hdr=$(ls -d /usr/src/linux-headers-*-amd64 2>/dev/null | sort -V | tail -1 || true)
  common=$(ls -d /usr/src/linux-headers-*-common 2>/dev/null | sort -V | tail -1 || true)
  if [ -z "$hdr" ]; then say "error: no /usr/src/linux-headers-*-amd64 found"; exit 3; fi
  mkdir -p "$KDIR"
  ln -sfn "$hdr" "$KDIR/build"
  ln -sfn "${common:-$hdr}" "$KDIR/source"
  say "no headers package matches kernel $(uname -r): linked $KDIR/build -> $hdr, source -> ${common:-$hdr}"
else
  say "kernel headers present at $KDIR/build"
fi

# 3. tracefs: bcc attaches without it but its cleanup then complains.
if [ ! -e /sys/kernel/tracing/uprobe_events ]; then
  mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null && say "mounted tracefs" || say "warning: could not mount tracefs"
fi
if [ ! -e /sys/kernel/debug/tracing ] && [ -d /sys/kernel/debug ]; then
  mount -t debugfs nodev /sys/kernel/debug 2>/dev/null || true
fi

# 4. Virtualenv from Debian's python3 so that `import bcc` works inside it.
if [ ! -x .venv/bin/python ] || ! .venv/bin/python -c 'import bcc' 2>/dev/null; then
  rm -rf .venv
  /usr/bin/python3 -m venv --system-site-packages .venv
  say "created .venv from /usr/bin/python3"
fi
PIP=(.venv/bin/python -m pip install -q --disable-pip-version-check)
# torch first and pinned: anything else resolving torch pulls GBs of CUDA wheels.
if ! .venv/bin/python -c 'import torch, sys; sys.exit(torch.__version__.split("+")[0] != "2.13.0")' 2>/dev/null; then
  say "installing torch==2.13.0 (CPU wheel)"
  "${PIP[@]}" "torch==2.13.0" 2> >(grep -v 'is ignored' >&2)
fi
stamp=.venv/.rlscope-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  say "installing rlscope-top (editable) with extras demo,test,bench,frameworks"
  "${PIP[@]}" -e ".[demo,test,bench,frameworks]" 2> >(grep -v 'is ignored' >&2)
  touch "$stamp"
else
  say "rlscope-top already installed in .venv"
fi
.venv/bin/python -c 'import bcc' || { say "error: bcc not importable in .venv"; exit 4; }

# 5. The GPU agent (probes/gpu_agent.c): C, built against the CUPTI headers of the
#    nvidia-cuda-cupti wheel; it loads libcupti itself at run time, so it builds and loads
#    on a machine without a GPU. Rebuilt when its source is newer.
bash scripts/build-agent.sh

# 6. Compile the eBPF program once and keep it (/var/cache/rlscope-top, probes/bpf_cache.py):
#    every attach, the first one included, then loads it instead of compiling (2-5 s).
say "$(.venv/bin/python -m rlscope_top.probes.bpf_cache 2>&1 | tail -1)"
say "ready: $ROOT/.venv/bin/rlscope-top"
