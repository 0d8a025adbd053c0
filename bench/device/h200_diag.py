"""Last device call: why kernel counts differ from torch.profiler's, the native `run`, after-detach speed.

Ran as written on an H200 on 2026-11-26 (docs/gpu-validation.md; its JSON is in docs/gpu-runs/).
Usage on the device, after .device-carry/bcc/setup.sh, with .device-carry/py and the agent carried:
  source .device-carry/py/env.sh && R=$PWD && cd /tmp && python3 $R/bench/device/h200_diag.py $R $OUT   (writes $OUT/diag.json)
"""
import collections, json, os, subprocess, sys, tempfile, time
R = sys.argv[1]; OUT = sys.argv[2]
PY = sys.executable; RLS = [PY, "-m", "rlscope_top.cli"]; LOOP = os.path.join(R, "bench/workloads/launch_loop.py")
res = {}
def dump(): json.dump(res, open(os.path.join(OUT, "diag.json"), "w"), indent=1, default=str)
tmp = tempfile.mkdtemp()
PROF = r'''
import collections, json, torch
torch.manual_seed(0); torch.set_num_threads(1); dev = "cuda"
model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Tanh(), torch.nn.Linear(64, 4)).to(dev)
opt = torch.optim.Adam(model.parameters(), lr=1e-3); x = torch.randn(32, 64, device=dev)
def step():
    opt.zero_grad(); loss = model(x).pow(2).mean(); loss.backward(); opt.step(); return loss
for _ in range(20): step()
torch.cuda.synchronize()
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]) as p:
    for _ in range(200): loss = step()
    loss.item()
c = collections.Counter(e.name[:70] for e in p.events() if e.device_type == torch.autograd.DeviceType.CUDA)
print(json.dumps({"total": sum(c.values()), "names": c.most_common(60)}))
'''
try:
    p = subprocess.run([PY, "-c", PROF], capture_output=True, text=True, timeout=90, cwd=tmp)
    res["profiler"] = json.loads([l for l in p.stdout.splitlines() if l.startswith("{")][-1]) if p.returncode == 0 else p.stderr[-800:]
except Exception as e: res["profiler"] = repr(e)
dump(); print("profiler", json.dumps(res["profiler"])[:1500], flush=True)
for steps in (0, 200):
    s = os.path.join(tmp, f"r{steps}.json")
    p = subprocess.run([*RLS, "run", "--headless", "-q", "--max-overhead", "100", "--summary", s, "--", PY, LOOP, str(steps)],
                       capture_output=True, text=True, timeout=120, cwd=tmp)
    try:
        sm = json.load(open(s)); g = sm["gpu"]; a = sm["operations"]["<all>"]["gpu"]
        res[f"run{steps}"] = {"kernels": g["kernels"], "all": {k: a.get(k) for k in ("kernels", "memcpys", "memsets", "joined")},
                              "top": [(k["name"][:70], k["count"]) for k in g.get("top_kernels", [])][:60], "lost": g["lost"],
                              "agent_records": g["agent"]["records"]}
    except Exception as e: res[f"run{steps}"] = {"err": repr(e), "stderr": p.stderr[-600:]}
    dump(); print(f"run{steps}", json.dumps(res[f"run{steps}"])[:2500], flush=True)
CU = r'''
#include <cstdio>
#include <cstdlib>
__global__ void tiny(float *x) { x[threadIdx.x] += 1.0f; }
int main(int argc, char **argv) { int n = atoi(argv[1]); float *x; cudaMalloc(&x, 1024 * sizeof(float));
  for (int i = 0; i < n; i++) tiny<<<1, 256>>>(x); cudaDeviceSynchronize(); printf("made %d\n", n); return 0; }
'''
open(os.path.join(tmp, "t.cu"), "w").write(CU)
c = subprocess.run(["nvcc", "-O2", "-o", os.path.join(tmp, "t"), os.path.join(tmp, "t.cu")], capture_output=True, text=True)
s = os.path.join(tmp, "n.json")
p = subprocess.run([*RLS, "run", "--headless", "-q", "--max-overhead", "100", "--summary", s, "--", os.path.join(tmp, "t"), "1009"],
                   capture_output=True, text=True, timeout=120, cwd=tmp)
try:
    g = json.load(open(s))["gpu"]
    res["native_run"] = {"rc": p.returncode, "stderr": p.stderr[-1200:], "stdout": p.stdout[-200:], "source": g.get("source"),
                         "notice": g.get("notice"), "kernels": g.get("kernels"), "agent": g.get("agent")}
except Exception as e: res["native_run"] = {"err": repr(e), "rc": p.returncode, "stderr": p.stderr[-1200:], "nvcc": c.stderr[-300:]}
dump(); print("native_run", json.dumps(res["native_run"])[:2000], flush=True)
loop = subprocess.Popen([PY, LOOP, "--forever"], stdout=subprocess.PIPE, text=True, cwd=tmp); loop.stdout.readline()
lines = []; t_attach = None
def read_for(sec):
    end = time.monotonic() + sec
    while time.monotonic() < end:
        l = loop.stdout.readline()
        if l.startswith("{"): lines.append(json.loads(l))
read_for(9); t_attach = time.monotonic()
m = subprocess.Popen([*RLS, "attach", str(loop.pid), "--gpu-activity", "--headless", "--duration", "5", "--max-overhead", "100",
                      "--summary", os.path.join(tmp, "a.json")], stderr=subprocess.PIPE, text=True, cwd=tmp)
read_for(8); m.wait(timeout=60); t_det = time.monotonic(); read_for(14); loop.terminate(); loop.wait()
rates = [(round(b["t"] - t_attach, 1), round((b["steps"] - a["steps"]) / (b["t"] - a["t"]))) for a, b in zip(lines, lines[1:])]
res["after_detach"] = {"detached_at": round(t_det - t_attach, 1), "rates": rates, "stderr": m.stderr.read()[-300:]}
dump(); print("after_detach", json.dumps(res["after_detach"]), flush=True)
