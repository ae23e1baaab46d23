#!/usr/bin/env bash
# recompute k=2 speculative ÷ plain, an old commit ($OLD) against this one ($NEW), alternating processes (embedded model, compiled, one thread)
PY=${PY:-python}
OLD=${OLD:?a worktree of the old commit}; NEW=${NEW:-$(git rev-parse --show-toplevel)}
SNIP='
import json, statistics, time, torch
torch.set_num_threads(1)
from qwen.model import Model
from qwen.mtp import MTP, generate_mtp
from qwen.sample import generate
from qwen.chat import Chat
from qwen.weights import find_model
try:
    from qwen.compiled import warm_up
except ImportError:
    from qwen.compile import warm_up
p = find_model(); m = Model.from_pretrained(p); h = MTP.from_pretrained(m.cfg, p, lm_head=m.lm_head); chat = Chat(m, p)
r = warm_up(m, h, ks=(2,), rollbacks=("select", "recompute"), keep_if_faster=False)
m, h = r.get("model", m), r.get("head", h)          # the compiled views (since the views replaced model.compiled)
ratios = {}
for prompt in ["1 In the beginning God created the heaven and the earth.", "The LORD is my shepherd;", "The :mod:`os` module provides"]:
    ids = chat.encode(prompt)
    for rb in ("recompute", "select"):
        tp, ts = [], []
        for _ in range(5):
            t = time.perf_counter(); plain = generate(m, ids, 120, chat.stop); tp.append(time.perf_counter() - t)
            t = time.perf_counter(); spec = generate_mtp(m, h, ids, 120, chat.stop, k=2, rollback=rb)[0]; ts.append(time.perf_counter() - t)
            assert spec == plain
        ratios.setdefault(rb, []).append(statistics.median(tp) / statistics.median(ts))
print("AB", json.dumps({rb: round(statistics.mean(v), 3) for rb, v in ratios.items()}))
'
export QWEN_COMPILE_WORKERS=1
for rep in 1 2 3 4; do
  for ver in old new; do
    dir=$OLD; [ $ver = new ] && dir=$NEW
    cd $dir; export QWEN_COMPILE_CACHE=${CACHES:-/tmp}/abcache-$ver
    echo "rep $rep $ver: $($PY -c "$SNIP" 2>&1 | grep '^AB\|Error' | tail -1)"
  done
done
