"""bf16 8192^3 matmul TFLOP/s on random data: 3 warm-ups, then 10 timed reps (CUDA events)."""
import json
import sys
import time

import torch
n = int(sys.argv[1]) if len(sys.argv) > 1 else 8192
dev = "cuda" if torch.cuda.is_available() else "cpu"
a = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
b = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
for _ in range(3):
    c = a @ b
res = []
if dev == "cuda":
    torch.cuda.synchronize()
    for _ in range(10):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        c = a @ b
        e.record()
        e.synchronize()
        res.append(s.elapsed_time(e) / 1000)
else:
    for _ in range(10):
        t = time.perf_counter()
        c = a @ b
        res.append(time.perf_counter() - t)
tf = [2 * n ** 3 / t / 1e12 for t in res]
print(json.dumps({"n": n, "device": torch.cuda.get_device_name() if dev == "cuda" else "cpu",
                  "torch": torch.__version__, "tflops_mean": sum(tf) / len(tf),
                  "tflops_min": min(tf), "tflops_max": max(tf),
                  "ms_each": [round(t * 1000, 3) for t in res]}))
