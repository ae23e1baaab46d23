#!/usr/bin/env bash
# A/B of the embedded model, an old commit ($OLD, a worktree) against this one ($NEW), alternating, one thread, each with its own compile cache.
set -u
OLD=${OLD:?a worktree of the old commit}; NEW=${NEW:-$(git rev-parse --show-toplevel)}
PY=${PY:-python}
SNIP='
import json, time, torch
torch.set_num_threads(1)
from qwen.model import Model
from qwen.mtp import MTP
from qwen.weights import find_model
try:
    from qwen.compiled import warm_up
except ImportError:
    from qwen.compile import warm_up
p = find_model(); t0 = time.perf_counter()
m = Model.from_pretrained(p); h = MTP.from_pretrained(m.cfg, p, lm_head=m.lm_head)
t = time.perf_counter(); r = warm_up(m, h, ks=(2,))
print("AB", json.dumps({"warm_s": time.perf_counter() - t, "speedups": r["speedups"], "status": str(r["status"])}))
'
echo "capability: $($PY -c 'import torch; print(torch.backends.cpu.get_cpu_capability())')"
for rep in 1 2 3; do
  for ver in old new; do
    dir=$OLD; [ $ver = new ] && dir=$NEW
    export QWEN_COMPILE_CACHE=${CACHES:-/tmp}/abcache-$ver QWEN_COMPILE_WORKERS=1
    cd $dir
    s=$(date +%s.%N); out=$($PY -c "$SNIP" 2>/dev/null | grep '^AB'); e=$(date +%s.%N)
    echo "rep $rep $ver warm: $out process_s=$(echo "$e - $s" | bc)"
    $PY -m qwen.bench spec --ks 2 --threads 1 --compile --json ${OUT:-/tmp}/ab-$ver-$rep.json > ${OUT:-/tmp}/ab-$ver-$rep.txt 2>&1
    echo "rep $rep $ver spec: $($PY -c "import json; d=json.load(open('${OUT:-/tmp}/ab-$ver-$rep.json')); print({k: round(v['mean_speedup'],3) for k, v in d['summary'].items()}, 'identical', all(v['all_identical'] for v in d['summary'].values()))")"
  done
done
