#!/usr/bin/env bash
# On a lent CUDA device, in the project root with .gpu/ carried (packaging/cuda-prebuild.sh):
# unpack the prebuilt llama.cpp (or build it there if it does not load), install the kit's wheels,
# write random-weight copies of the default pair, then measure: the cost of a decode of n tokens
# (llama-bench), SpecChat's bench with the measured curve (target as its own draft) beside
# llama.cpp's binaries, and the host table. Output: stdout and $OUT. About 2.5 min on an H100.
# `device-measure.sh setup` sets up and measures nothing. `device-measure.sh real`, a later call
# on the same warm machine (what it set up in /tmp stays; the project's ignored folders do not):
# a real model carried in pieces (.gpu-real1/part-aa, .gpu-real2/part-ab: split -b 47M, one piece
# a call, each folder in .git/info/exclude, the first copied to /tmp/w by its call; .gpu-real1/
# sha256 holds `sha256sum`'s line for real.gguf) is put together, checked, and measured on real
# text: off, lookup and Auto on the default suite, and on the held-out suite beside llama.cpp's
# ngram-simple, the host table, then the top-2 gap at each greedy divergence
# (docs/bench/divergence_gaps.py). About 2 min for SmolLM2-135M.
# `device-measure.sh drift`: the same model through docs/bench/batch_drift.py, and Auto against off
# alternating on the prompts where it drafts little.
# `device-measure.sh costs [e2b]`, after the set-up on the same warm machine: what speculation's
# pieces cost on CUDA (`doctor --drafter-costs`, twice each, the checkout's own code): random-weight
# Qwen3.5-0.8B with its MTP head (hybrid: snapshots, rollback) and the tiny Gemma 4 pair, written
# here by tests/tinymodel.py (~40 s); `e2b` adds the Gemma 4 E2B pair (5 GB, minutes to write).
export PYTHONUNBUFFERED=1; W=/tmp/w; B=$W/build/bin; O=${OUT:-$W}; mkdir -p "$B" "$O"
t0=$(date +%s); el() { echo "=== [$(( $(date +%s) - t0 )) s] $*"; }
el start; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
CUB=$(find /usr/local /opt /usr/lib -name 'libcublas.so.13' 2>/dev/null | head -1)
RT=$(find /usr/local /opt /usr/lib -name 'libcudart.so.13' 2>/dev/null | head -1)
export LD_LIBRARY_PATH=$B:$(dirname "${CUB:-/x/x}"):$(dirname "${RT:-/x/x}"):/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
if [ "${1:-}" = costs ]; then
  [ -f $W/ready ] || { echo "no set-up on this machine: run device-measure.sh setup first (it went back?)"; exit 1; }
  export PYTHONPATH=$PWD/app:/tmp/site LLAMA_CPP_LIB_PATH=$B
  el "random-weight models at real shapes"
  H=$W/hyb/qwen35-0.8b-shape-mtp-q8_0.gguf
  [ -f $H ] || python3 tests/tinymodel.py qwen35-mtp-real $W/hyb || exit 1
  python3 tests/tinymodel.py gemma4-assistant $W/g4 || exit 1
  models="$H $W/g4/tiny-gemma4.gguf"
  if [ "${2:-}" = e2b ]; then
    E=$W/e2b/gemma4-e2b-shape-q80.gguf
    [ -f $E ] || timeout 400 python3 -c "import sys; from pathlib import Path; sys.path.insert(0, 'tests')
import tinymodel_gemma4 as g; g.write_gemma4_e2b_pair(Path('$W/e2b'), 'Q8_0')" || exit 1
    models="$models $E"
  fi
  for m in $models; do
    n=$(basename $m .gguf)
    el "cost of speculation, $n (table, then JSON: two measurements)"
    timeout 200 python3 -m specchat.cli.main doctor --drafter-costs $m --repeats 7 2>&1 | tee "$O/costs-$n.txt"
    timeout 200 python3 -m specchat.cli.main doctor --drafter-costs $m --repeats 7 --json > "$O/costs-$n.json"
    [ -s "$O/costs-$n.json" ] && python3 -c "import json, sys; print(json.dumps(json.load(open(sys.argv[1]))))" "$O/costs-$n.json"
  done
  el done; exit 0
fi
if [ "${1:-}" = real ] || [ "${1:-}" = drift ]; then
  [ -f $W/ready ] || { echo "no set-up on this machine: run device-measure.sh first (it went back?)"; exit 1; }
  export PYTHONPATH=/tmp/site LLAMA_CPP_LIB_PATH=$B
  [ -d .gpu-real1 ] || cp -r $W/.gpu-real1 .  # a piece carried by an earlier call (kept in $W)
  cat .gpu-real*/part-* > $W/real.gguf && (cd $W && sha256sum -c "$OLDPWD/.gpu-real1/sha256") || exit 1
  if [ "$1" = drift ]; then
    el "real weights: a verification batch's logits against one-token decoding's"
    timeout 300 python3 docs/bench/batch_drift.py --target $W/real.gguf --gpu-layers -1 --tokens 128 \
      --prompts edit-docstring,quote-paragraph,chat-threads,edit-type-hints,edit-rename,chat-review-tips
    el "real weights: Auto against off alternating where it drafts little"
    timeout -s INT -k 15 200 python3 -m specchat.cli.main bench --target $W/real.gguf --no-draft \
      --gpu-layers -1 --modes auto --pairing alternate --repeats 3 --max-tokens 256 --json "$O/alt.json" \
      --prompts code-lru-cache,code-csv-stats,chat-threads,chat-review-tips,conv-edit-twice,edit-add-param,edit-rename-class,quote-summary,cross-same-question \
      --md "$O/alt.md" 2>&1 | sed -n '/## Targets/,$p'
    el done; exit 0
  fi
  el "real weights, default suite: off, lookup, Auto (measured GPU curve)"
  timeout -s INT -k 15 220 python3 -m specchat.cli.main bench --target $W/real.gguf --no-draft --gpu-layers -1 \
    --modes lookup,auto --repeats 2 --max-tokens 256 --json "$O/real.json" --md "$O/real.md" 2>&1 | tail -40
  el "real weights, held-out suite, beside llama.cpp's ngram-simple"
  timeout -s INT -k 15 170 python3 -m specchat.cli.main bench --suite heldout --target $W/real.gguf --no-draft \
    --gpu-layers -1 --modes lookup,auto --repeats 2 --max-tokens 256 --peers llama.cpp --llama-cpp-bin $B \
    --json "$O/real-heldout.json" --md "$O/real-heldout.md" 2>&1 | tail -30
  el "real weights, host table (T=0/1, repeat penalty 1/1.1)"
  timeout -s INT -k 15 90 python3 -m specchat.cli.main bench --target $W/real.gguf --no-draft --gpu-layers -1 \
    --modes lookup,auto --prompts code-lru-cache,edit-rename,quote-paragraph,chat-threads --repeats 1 \
    --max-tokens 128 --host-temperature 1 --repeat-penalty 1.1 --json "$O/real-host.json" \
    --md "$O/real-host.md" 2>&1 | sed -n '/Host overhead/,/decode ms\/token: after/p'
  el "top-2 gaps at the divergences"
  for r in real real-heldout; do timeout 40 python3 docs/bench/divergence_gaps.py "$O/$r.json"; done
  el done; exit 0
fi
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .gpu/whl/*.whl
rm -rf /tmp/site/llama_cpp; cp -r .gpu/llama_cpp /tmp/site/llama_cpp
tar xJf .gpu/prebuilt.tar.xz -C "$B"
ok=$(PYTHONPATH=/tmp/site LLAMA_CPP_LIB_PATH=$B python3 -c 'import llama_cpp; print(llama_cpp.llama_supports_gpu_offload())' 2>&1 | tail -1)
if [ "$ok" != True ]; then
  el "the prebuilt llama.cpp does not load here ($ok): building"; rm -rf $W/build; tar xzf .gpu/llama-src.tar.gz -C $W
  cmake -S $W/llama.cpp -B $W/build -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON -DBUILD_SHARED_LIBS=ON \
    -DLLAMA_OPENSSL=OFF -DGGML_CUDA_NCCL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF > "$O/build.txt" 2>&1 \
    && cmake --build $W/build -j "$(nproc)" --target llama llama-bench llama-speculative-simple llama-completion >> "$O/build.txt" 2>&1 \
    || { tail -30 "$O/build.txt"; exit 1; }
fi
export PYTHONPATH=/tmp/site LLAMA_CPP_LIB_PATH=$B; touch $W/ready
if [ "${1:-}" = setup ]; then el "set up (no measurement)"; exit 0; fi
for m in target draft; do gunzip -c .gpu/$m.hdr.gz > $W/$m.hdr && python3 .gpu/randgguf.py $W/$m.hdr $W/$m.gguf; done
el "cost of a decode of n tokens (llama-bench, 10 repetitions)"
$B/llama-bench -m $W/target.gguf -ngl 99 -p 1,2,4,8,16,32,64 -n 64 -r 10 -o json > "$O/llama-bench.json"
$B/llama-bench -m $W/draft.gguf -ngl 99 -p 1 -n 64 -r 5 -o md
el "bench: target as its own draft, with llama.cpp's binaries"
timeout 300 python3 -m specchat.cli.main bench --target $W/target.gguf --draft $W/target.gguf --gpu-layers -1 \
  --modes draft,lookup,auto --prompts edit-rename,quote-verbatim-300,chat-threads --repeats 2 --max-tokens 256 \
  --peers llama.cpp --llama-cpp-bin $B --json "$O/bench.json" --md "$O/bench.md" 2>&1 | grep -v watching | tail -30
el "host table (T=0/1, repeat penalty 1/1.1), the 0.5B copy as draft"
timeout 200 python3 -m specchat.cli.main bench --target $W/target.gguf --draft $W/draft.gguf --gpu-layers -1 \
  --modes draft,lookup,auto --prompts edit-rename,chat-threads --repeats 1 --max-tokens 128 --host-temperature 1 \
  --repeat-penalty 1.1 --json "$O/host.json" --md "$O/host.md" 2>&1 | sed -n '/Host overhead/,/decode ms\/token: after/p'
el done
