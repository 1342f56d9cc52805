#!/bin/bash
# Device check: matmul ceiling, random-weight Llama-3.1-8B-shape server, prefilltui sweep.
# Env: OUT (results dir), PY (python), SERVER_ARGS (extra server args), LENGTHS, REPEATS, MM_N,
# COUNTER_DEVICE/COUNTER_SHAPE/COUNTER_LENGTHS (the FLOP counter step), MFU_MODEL.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
PY=${PY:-python3}
LENGTHS=${LENGTHS:-16,64,256,512,1024,2048,4096,8192}
REPEATS=${REPEATS:-4}
MM_N=${MM_N:-8192}
PORT=${PORT:-8080}
T0=$(date +%s)
el() { echo "[+$(( $(date +%s) - T0 ))s] $*"; }
{
  el "env"; nvidia-smi 2>&1; nvidia-smi -q -d POWER,CLOCK 2>&1 | head -80
  $PY -c "import torch,transformers,sys;print(sys.version);print('torch',torch.__version__,'transformers',transformers.__version__,'cuda',torch.cuda.is_available())"
  $PY -c "import textual,httpx_sse,platformdirs,pynvml;print('textual',textual.__version__)"
  el "matmul"; timeout 120 $PY $HERE/matmul.py $MM_N
} > $OUT/env.txt 2>&1
tail -2 $OUT/env.txt
el "estimate"
{ $PY -m prefilltui estimate --model llama-3-8b --gpu h200 --tokens 2048
  $PY -m prefilltui estimate --model llama-3-8b --gpu h200 --tokens 8192
  $PY -m prefilltui estimate --model llama-3-8b --gpu h200 --tokens 2048 --format json; } > $OUT/estimate.txt 2>&1
el "server start"
$PY $HERE/gpu_server.py --port $PORT ${SERVER_ARGS:-} > $OUT/server.log 2>&1 &
SPID=$!
(command -v nvidia-smi >/dev/null && nvidia-smi dmon -s pucm -d 1 > $OUT/dmon.txt 2>&1) &
DPID=$!
ok=0
for i in $(seq 1 200); do
  if $PY -c "import urllib.request as u;u.urlopen('http://127.0.0.1:$PORT/health',timeout=2)" 2>/dev/null; then ok=1; break; fi
  kill -0 $SPID 2>/dev/null || break
  sleep 1
done
cat $OUT/server.log
if [ $ok != 1 ]; then el "SERVER NOT UP"; kill $SPID $DPID 2>/dev/null; exit 1; fi
el "server up"; $PY -c "import urllib.request as u;print(u.urlopen('http://127.0.0.1:$PORT/v1/models').read().decode())"
el "sweep"
timeout 240 $PY -m prefilltui sweep http://127.0.0.1:$PORT --lengths $LENGTHS --repeats $REPEATS --warmup 2 \
   --seed 7 --timeout 60 --sample-hz 20 --out $OUT/run.jsonl --format json ${SWEEP_ARGS:-} > $OUT/sweep.json 2> $OUT/sweep.log
echo "sweep rc=$?"
cat $OUT/sweep.log | tail -20
el "report"
$PY -m prefilltui report $OUT/run.jsonl > $OUT/report.txt 2>&1; echo "report rc=$?"
cat $OUT/report.txt
pkill -P $DPID 2>/dev/null; kill $DPID 2>/dev/null; kill $SPID 2>/dev/null
wait $SPID 2>/dev/null
# PyTorch's FLOP count of the same forward pass (the server is down: the GPU is free),
# then MFU of the fit under every count (issue 23: quick 2·P, matmul, the counter)
el "flop counter"
timeout 180 $PY $HERE/../../flopcount/count_torch.py --device ${COUNTER_DEVICE:-cuda} \
   --shapes ${COUNTER_SHAPE:-llama-3-8b} --lengths ${COUNTER_LENGTHS:-1024,2048,4096,8192} \
   > $OUT/counter.json 2> $OUT/counter.log; echo "counter rc=$?"
el "mfu"
$PY $HERE/mfu_counts.py $OUT/sweep.json $OUT/counter.json --model ${MFU_MODEL:-llama-3-8b} \
   > $OUT/mfu.txt 2>&1 || $PY $HERE/mfu_counts.py $OUT/sweep.json --model ${MFU_MODEL:-llama-3-8b} > $OUT/mfu.txt 2>&1
cat $OUT/mfu.txt
el "done"
