"""Device: does calibrating fix the self-report? calibrate, then attach twice to a launch loop.

Ran as written on an H200 on 2026-11-26 (docs/gpu-validation.md; its JSON is in docs/gpu-runs/).
Usage on the device, after .device-carry/bcc/setup.sh, with .device-carry/py and the agent carried:
  source .device-carry/py/env.sh && R=$PWD && cd /tmp && python3 $R/bench/device/h200_selfreport.py $R $OUT   (writes $OUT/diag2.json)
"""
import json, os, subprocess, sys, tempfile, time
R, OUT = sys.argv[1], sys.argv[2]
PY = sys.executable; RLS = [PY, "-m", "rlscope_top.cli"]; LOOP = os.path.join(R, "bench/workloads/launch_loop.py")
res = {}; tmp = tempfile.mkdtemp()
def dump(): json.dump(res, open(os.path.join(OUT, "diag2.json"), "w"), indent=1, default=str)
t = time.monotonic()
c = subprocess.run([*RLS, "calibrate"], capture_output=True, text=True, timeout=150, cwd=tmp)
res["calibrate"] = {"rc": c.returncode, "s": round(time.monotonic() - t, 1), "out": (c.stdout + c.stderr)[-1500:]}
dump(); print("calibrate", json.dumps(res["calibrate"]), flush=True)
loop = subprocess.Popen([PY, LOOP, "--forever"], stdout=subprocess.PIPE, text=True, cwd=tmp); loop.stdout.readline()
lines = []
def read_for(sec):
    end = time.monotonic() + sec
    while time.monotonic() < end:
        l = loop.stdout.readline()
        if l.startswith("{"): lines.append(json.loads(l))
def rate(a, b):
    p = [x for x in lines if a <= x["t"] <= b]
    return (p[-1]["steps"] - p[0]["steps"]) / (p[-1]["t"] - p[0]["t"]) if len(p) > 1 else None
read_for(2); t0 = time.monotonic(); read_for(6); before = rate(t0, time.monotonic())
for name, extra in (("default", []), ("full", ["--max-overhead", "100"])):
    s = os.path.join(tmp, name + ".json")
    m = subprocess.Popen([*RLS, "attach", str(loop.pid), "--gpu-activity", "--headless", "--duration", "8", *extra,
                          "--summary", s], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, cwd=tmp)
    ta = time.monotonic(); read_for(10); m.wait(timeout=60); td = time.monotonic()
    try:
        sm = json.load(open(s)); o = sm["overhead"]
        r = rate(ta + 2, td - 1)
        res[name] = {"rate": r, "before": before, "slowdown_pct": round(100 * (1 - r / before), 1) if r and before else None,
                     "self_report_pct": o["estimated_pct"], "by_source_s": o["by_source_s"], "calibrated": o.get("calibrated"),
                     "wall_s": sm["totals"]["wall_s"], "modes": sm["budget"]["modes"], "gpu_mode": sm["gpu"]["mode"],
                     "hits": o.get("probe_hits"), "prices": o.get("measured_prices")}
    except Exception as e: res[name] = {"err": repr(e), "stderr": m.stderr.read()[-600:]}
    read_for(3); t0 = time.monotonic(); read_for(4); before = rate(t0, time.monotonic())
    dump(); print(name, json.dumps(res[name]), flush=True)
loop.terminate(); loop.wait()
