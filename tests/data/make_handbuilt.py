"""Writes cupti_ppo_update.json: a HAND-BUILT CUPTI record sequence (not captured).

It models four PPO update steps of a small CUDA policy as cupti-python delivers them:
runtime API records (cudaMemcpyAsync, cudaLaunchKernel, cudaMemsetAsync,
cudaGraphLaunch), one driver-API launch (cuLaunchKernel, as Triton issues), kernels on
two streams (some overlapping), memcpys both ways, a memset, a CUDA graph whose three
kernels share one correlation id, and a kernel whose API record is missing. Field
names and kinds are those of the cupti-python classes named in ``type``.
Run it again to regenerate the file: ``python tests/data/make_handbuilt.py``.
"""

import json
from pathlib import Path

BASE = 1_763_700_000_000_000_000      # CUPTI timestamps (ns); "clock" maps them to CLOCK_MONOTONIC
MONO = 5_000_000_000_000
TID, WORKER = 4242, 4250
KERNELS = ["ampere_sgemm_32x32_sliced1x4_tn",
           "void at::native::vectorized_elementwise_kernel<4, at::native::tanh_kernel_cuda>(int, Functor, Array)",
           "ampere_sgemm_64x32_sliced1x4_nt",
           "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps>>(R)",
           "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<FusedAdam>(T, U)"]


def build():
    recs, corr = [], 100
    t = BASE + 1_000_000
    for step in range(4):
        # H2D copy of the observation batch
        corr += 1
        recs += [api(t, t + 6_000, corr, "cudaMemcpyAsync_v3020"),
                 {"type": "ActivityMemcpy7", "start": t + 9_000, "end": t + 13_000, "device_id": 0, "stream_id": 7,
                  "correlation_id": corr, "bytes": 4096, "copy_kind": "HTOD", "context_id": 1}]
        t += 20_000
        for i, name in enumerate(KERNELS):
            corr += 1
            dur = [40_000, 8_000, 30_000, 12_000, 25_000][i]
            recs += [api(t, t + 4_000, corr, "cudaLaunchKernel_v7000"),
                     kernel(t + 6_000, t + 6_000 + dur, corr, name, stream=7)]
            t += dur + 10_000
        # two kernels on a second stream, overlapping the last one of stream 7 by 10 us
        for j in range(2):
            corr += 1
            recs += [api(t - 20_000, t - 17_000, corr, "cudaLaunchKernel_v7000", tid=WORKER),
                     kernel(t - 10_000 + j * 15_000, t + 5_000 + j * 15_000, corr, KERNELS[1], stream=13)]
        t += 40_000
        corr += 1          # zero_grad
        recs += [api(t, t + 3_000, corr, "cudaMemsetAsync_v3020"),
                 {"type": "ActivityMemset5", "start": t + 5_000, "end": t + 7_000, "device_id": 0, "stream_id": 7,
                  "correlation_id": corr, "bytes": 65536, "value": 0, "context_id": 1}]
        t += 10_000
        corr += 1          # loss to the host
        recs += [api(t, t + 30_000, corr, "cudaMemcpyAsync_v3020"),
                 {"type": "ActivityMemcpy7", "start": t + 20_000, "end": t + 22_000, "device_id": 0, "stream_id": 7,
                  "correlation_id": corr, "bytes": 4, "copy_kind": "DTOH", "context_id": 1}]
        t += 1_000_000     # the CPU side of the step (environment, Python)
    corr += 1              # a Triton kernel launched through the driver API
    recs += [{"type": "ActivityAPI", "kind": "DRIVER", "start": t, "end": t + 3_000, "thread_id": TID,
              "process_id": 77, "correlation_id": corr, "cbid": "cuLaunchKernel", "return_value": 0},
             kernel(t + 5_000, t + 25_000, corr, "triton_poi_fused_add_tanh_0", stream=7)]
    t += 50_000
    corr += 1              # a CUDA graph: three kernels, one correlation id
    recs.append(api(t, t + 8_000, corr, "cudaGraphLaunch_v10000"))
    for g in range(3):
        recs.append(kernel(t + 10_000 + g * 20_000, t + 25_000 + g * 20_000, corr, KERNELS[0], stream=7))
    t += 100_000
    recs.append(kernel(t, t + 9_000, 999_999, KERNELS[1], stream=7))   # its API record is missing
    return recs


def api(start, end, corr, cbid, tid=TID):
    return {"type": "ActivityAPI", "kind": "RUNTIME", "start": start, "end": end, "thread_id": tid,
            "process_id": 77, "correlation_id": corr, "cbid": cbid, "return_value": 0}


def kernel(start, end, corr, name, stream):
    return {"type": "ActivityKernel13", "start": start, "end": end, "device_id": 0, "context_id": 1,
            "stream_id": stream, "correlation_id": corr, "name": name, "grid_x": 64, "grid_y": 1, "grid_z": 1,
            "block_x": 128, "block_y": 1, "block_z": 1}


if __name__ == "__main__":
    doc = {"hand_built": True, "steps": 4, "tids": [TID, WORKER],
           "about": "hand-built, not captured: see tests/data/README.md and make_handbuilt.py",
           "clock": [BASE, MONO], "records": build()}
    out = Path(__file__).with_name("cupti_ppo_update.json")
    out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {out} ({len(doc['records'])} records)")
