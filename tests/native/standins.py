"""Build the GPU stand-ins (tests/native/fake_cupti.c, fake_cuda.c) with gcc: for the test
suite and for bench/gpu_record_rate.py, on machines without a GPU."""

from __future__ import annotations

import glob
import os
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def cupti_include() -> str:
    """The CUPTI headers of the nvidia-cuda-cupti wheel (the agent is built against them)."""
    import nvidia  # noqa: PLC0415 - namespace package of the CUDA wheels

    for base in nvidia.__path__:
        for d in sorted(glob.glob(os.path.join(base, "cu*", "include"))):
            if os.path.exists(os.path.join(d, "cupti_activity.h")):
                return d
    raise RuntimeError("no CUPTI headers: pip install -e '.[test]' (nvidia-cuda-cupti, nvidia-cuda-crt)")


def build(out_dir: str) -> dict:
    """Compile the stand-ins into ``out_dir`` and (re)build the agent; returns their paths."""
    inc = cupti_include()
    cupti, cuda = os.path.join(out_dir, "libfake_cupti.so"), os.path.join(out_dir, "libcuda.so.1")
    subprocess.run(["gcc", "-O2", "-shared", "-fPIC", f"-I{inc}", "-o", cupti, os.path.join(HERE, "fake_cupti.c"),
                    "-lpthread"], check=True)
    subprocess.run(["gcc", "-O2", "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", cuda,
                    os.path.join(HERE, "fake_cuda.c"), "-ldl"], check=True)
    subprocess.run(["bash", os.path.join(REPO, "scripts", "build-agent.sh")], check=True, capture_output=True)
    return {"agent": os.path.join(REPO, "probes", "librlscope_gpu.so"), "cupti": cupti, "cuda": cuda,
            "include": inc, "dir": out_dir}
