#!/usr/bin/env bash
# On the GPU machine: builds tessera with CUDA, runs the tests labelled gpu, runs
# them again under compute-sanitizer's memcheck, and benches the CUDA device.
# Logs go to $OUT (or /tmp/gpu-check). See docs/gpu.md for what to carry. $TARGETS (ninja targets)
# builds less, e.g. TARGETS=chain_probe for the chain step alone.
#   tools/gpu/check.sh [tests|memcheck|bench|ab|moe|peer|kernels|chain|ws|profile|details|serve|gguf]...   (default: tests memcheck bench)
set -uo pipefail
OUT=${OUT:-/tmp/gpu-check}
mkdir -p "$OUT"
STEPS=${*:-tests memcheck bench}

# Debian 12's libhwy and libpcre2 (the GPU machine has neither), unpacked from the carried archive.
if [ -f .prev/deps.tar.xz ] && [ ! -d .deps ]; then tar -xJf .prev/deps.tar.xz; fi
if [ -d .deps ]; then
  export PKG_CONFIG_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu/pkgconfig
  export LD_LIBRARY_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu
  PREFIX=(-DCMAKE_PREFIX_PATH=$PWD/.deps/usr)
fi
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DTESSERA_CUDA=ON "${PREFIX[@]}" >"$OUT/configure.log" 2>&1 ||
  { tail -30 "$OUT/configure.log"; exit 1; }
ninja -C build-gpu ${TARGETS:-tessera gpu_test gpu_process_test nccl_test cuda_bench chain_probe ws_probe} >"$OUT/build.log" 2>&1 || { grep -A5 -E "error|FAILED" "$OUT/build.log" | head -60; exit 1; }
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee "$OUT/gpu.txt"

for step in $STEPS; do
  case $step in
    tests)
      ctest --test-dir build-gpu -L gpu --output-on-failure -j1 >"$OUT/tests.log" 2>&1
      echo "gpu tests rc $?"; grep -E "tests passed|tests failed|Failed|\*\*\*" "$OUT/tests.log" | tail -15 ;;
    memcheck)
      # Every gpu test (or those $MEMCHECK_FILTER names) under memcheck. API errors are not counted: one test makes an
      # allocation fail on purpose, and the device reports it as an error value.
      compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 build-gpu/bin/gpu_test \
        ${MEMCHECK_FILTER:+--gtest_filter=$MEMCHECK_FILTER} \
        >"$OUT/memcheck.log" 2>&1
      echo "memcheck rc $?"; grep -E "tests? ran|PASSED|FAILED|ERROR SUMMARY" "$OUT/memcheck.log" | tail -5 ;;
    peer)
      # tessera and Hugging Face transformers on one checkpoint of each shape, alternately.
      for shape in llama-3.2-1b llama-3-8b; do
        ckpt=/tmp/ckpt-$shape
        [ -d $ckpt ] || build-gpu/bin/tessera random-checkpoint --config bench/shapes/$shape.json --seed 1 \
          --dtype bf16 --out $ckpt >"$OUT/ckpt-$shape.log" 2>&1
        for round in ${ROUNDS:-1}; do
          echo "== $shape round $round: tessera"
          build-gpu/bin/tessera bench --device cuda --model $ckpt 2>&1 | tee "$OUT/tessera-$shape-$round.log" |
            grep -E "^(device|prefill|decode|copy)"
          build-gpu/bin/tessera bench --device cuda --model $ckpt --prompt 2048 --decode 1 2>&1 | grep -E "^prefill"
          echo "== $shape round $round: transformers"
          python3 tools/gpu/hf_peer.py --model $ckpt 2>&1 | tee "$OUT/hf-$shape-$round.log" | grep -E "^(transformers|prefill|decode)"
        done
      done ;;
    kernels)
      build-gpu/bin/cuda_bench | tee "$OUT/cuda_bench.log" ;;
    chain)
      # One chain of mma per output against the decode kernel's eight sums, at batch 1 (bench/chain_probe.cu).
      build-gpu/bin/chain_probe | tee "$OUT/chain_probe.log" ;;
    ws)
      # A warp-specialized wgmma GEMM in natural k order against mma_gemm and cuBLAS (bench/ws_probe.cu).
      timeout 300 build-gpu/bin/ws_probe | tee "$OUT/ws_probe.log" ;;
    profile)
      # Time per kernel of whole decode steps (Nsight Compute, clocks left alone), as CSV: three decode steps
      # (TESSERA_CUDA_PROFILE_STEPS=3 brackets them, so nothing else is profiled) of the 1B and 8B shapes at
      # batch 1 after a 512-token prompt (steps 2-4), and of the 8B shape with 64 sequences (steps 10-12: the
      # bench decodes 8 tokens of one sequence first). tools/gpu/steps.py sums them.
      for run in llama-3.2-1b: llama-3-8b: llama-3-8b:64; do
        shape=${run%:*} sequences=${run#*:}
        TESSERA_CUDA_PROFILE_STEPS=3 TESSERA_CUDA_PROFILE_FROM=${sequences:+10} ncu --profile-from-start off --clock-control none \
          --metrics gpu__time_duration.sum --csv build-gpu/bin/tessera bench --device cuda \
          --config bench/shapes/$shape.json --random-weights --seed 1 --dtype bf16 --prompt 512 --decode 8 \
          ${sequences:+--sequences $sequences} >"$OUT/profile-$shape${sequences:+-x$sequences}.csv" 2>"$OUT/profile.err"
        echo "profile $shape${sequences:+ x$sequences} rc $?"
      done
      # One 512-token prefill of the 8B shape (steps.py takes the longest step).
      ncu --clock-control none --launch-count 1500 --metrics gpu__time_duration.sum --csv \
        build-gpu/bin/tessera bench --device cuda --config bench/shapes/llama-3-8b.json --random-weights --seed 1 \
        --dtype bf16 --prompt 512 --decode 1 >"$OUT/profile-prefill.csv" 2>"$OUT/profile-prefill.err"
      echo "profile prefill rc $?"
      # The sums come back; the CSVs (one file each) stay on the machine.
      python3 tools/gpu/steps.py "$OUT"/profile-*.csv >"$OUT/profile.txt" 2>&1
      rm -f "$OUT"/profile-*.csv "$OUT"/profile*.err
      cat "$OUT/profile.txt" ;;
    details)
      # Nsight Compute's sections (speed of light, occupancy, warp stalls, memory) for the kernels named by
      # $KERNELS (a regex) in the second decode step of $SEQUENCES (default 64; empty: batch 1) sequences on the
      # $DETAILS_SHAPE (default llama-3-8b) shape (after the bench's 4 steps of one sequence), as text, into
      # details$DETAILS_TAG.txt.
      sequences=${SEQUENCES-64}
      TESSERA_CUDA_PROFILE_STEPS=1 TESSERA_CUDA_PROFILE_FROM=${sequences:+6} ncu --profile-from-start off --clock-control none \
        --kernel-name "regex:${KERNELS:-mma_attention|gemm_kernel}" --launch-count ${DETAILS:-6} \
        --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
        --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis \
        build-gpu/bin/tessera bench --device cuda --config bench/shapes/${DETAILS_SHAPE:-llama-3-8b}.json --random-weights \
        --seed 1 --dtype bf16 --prompt 512 --decode 4 ${sequences:+--sequences $sequences} >"$OUT/details${DETAILS_TAG:-}.txt" 2>"$OUT/details.err"
      echo "details rc $?"
      [ -n "${PREFILL-x}" ] || continue
      # And the kernels named by $PREFILL_KERNELS (default the tiled GEMM) of one prefill of $PREFILL tokens
      # (default 512; set empty: none), past their first 40 launches (the first kernels of a process pay for loading).
      ncu --clock-control none --kernel-name "regex:${PREFILL_KERNELS:-gemm_kernel}" --launch-skip 40 --launch-count 3 \
        --section SpeedOfLight --section Occupancy --section WarpStateStats --section MemoryWorkloadAnalysis \
        --section ComputeWorkloadAnalysis --section SourceCounters \
        build-gpu/bin/tessera bench --device cuda --config bench/shapes/llama-3-8b.json --random-weights --seed 1 \
        --dtype bf16 --prompt ${PREFILL:-512} --decode 1 >"$OUT/details-prefill.txt" 2>>"$OUT/details.err"
      echo "details prefill rc $?" ;;
    gguf)
      # Issue 19 point 8: tessera bench --device cuda on the Q8_0 and Q4_K_M files that tessera quantize makes from
      # a random checkpoint of the 8B shape, cut to $GGUF_LAYERS of its 32 layers when set (2 layers with a
      # 32,000-token vocabulary, GGUF_LAYERS=2 GGUF_VOCAB=32000, took 11 s to write and quantize on 16 cores; the
      # whole shape about 90 s). Then Nsight Compute's time per kernel and grid of one decode step
      # (tools/gpu/steps.py --grid): a step is 10 to 12 launches a layer and 6 more; the profile skips the prompt
      # and about 10 steps, and takes at least two whole steps ($GGUF_PROFILE=0: none).
      q=/tmp/gguf-${GGUF_LAYERS:-32}-${GGUF_VOCAB:-128256}
      if [ ! -d $q/ckpt ]; then
        mkdir -p $q
        python3 -c "import json, sys; c = json.load(open('bench/shapes/llama-3-8b.json'))
c.update(num_hidden_layers=int(sys.argv[1]), vocab_size=int(sys.argv[2]), bos_token_id=1, eos_token_id=2)
json.dump(c, open(sys.argv[3], 'w'))" ${GGUF_LAYERS:-32} ${GGUF_VOCAB:-128256} $q/config.json
        build-gpu/bin/tessera random-checkpoint --config $q/config.json --seed 1 --dtype bf16 --out $q/ckpt \
          >"$OUT/gguf.log" 2>&1
      fi
      for type in q8_0 q4_k_m; do
        [ -f $q/$type.gguf ] || build-gpu/bin/tessera quantize --model $q/ckpt --type $type --out $q/$type.gguf \
          --threads "$(nproc)" >>"$OUT/gguf.log" 2>&1
        build-gpu/bin/tessera bench --device cuda --model $q/$type.gguf --prompt 64 --decode 256 2>&1 |
          tee "$OUT/bench-gguf-$type.log" | grep -E "^(device|model|copy|prefill|decode)"
        # $AB (comma-separated VAR=value, e.g. AB=TESSERA_CUDA_QUANT_LEAN=1): the bench again with each switch,
        # then as built, ${ROUNDS:-2} times.
        IFS=, read -ra switches <<<"${AB:-}"
        for round in $(seq ${ROUNDS:-2}); do
          [ -n "${AB:-}" ] || break
          for with in "${switches[@]}" -; do
            echo "== $type ${with/-/as built}, round $round: $(env ${with/-/} build-gpu/bin/tessera bench --device cuda \
              --model $q/$type.gguf --prompt 64 --decode 256 2>&1 | grep -E "^decode" | tr -s ' ')"
          done
        done
        [ "${GGUF_PROFILE:-1}" = 0 ] && continue
        step=$((10 * ${GGUF_LAYERS:-32} + 6))
        ncu --clock-control none --launch-skip $((11 * step)) --launch-count $((3 * step)) \
          --metrics gpu__time_duration.sum --csv build-gpu/bin/tessera bench --device cuda --model $q/$type.gguf \
          --prompt 64 --decode 14 >"$OUT/profile-gguf-$type.csv" 2>"$OUT/profile-gguf-$type.err"
        python3 tools/gpu/steps.py --grid "$OUT/profile-gguf-$type.csv" | tee "$OUT/profile-gguf-$type.txt"
        rm -f "$OUT/profile-gguf-$type.csv" "$OUT/profile-gguf-$type.err"
        # What bounds the matmuls: Nsight Compute's sections for 15 matmuls from about the fourth decode step (5 or 6
        # a layer: q, k and v take one launch where they share a dtype; then the LM head), one line each: time, warp
        # instructions, issue slots busy, DRAM busy.
        layers=${GGUF_LAYERS:-32}
        ncu --clock-control none --kernel-name regex:quant_matmul --launch-skip $((4 * (5 * layers + 1))) \
          --launch-count 15 --section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats \
          --section ComputeWorkloadAnalysis --section InstructionStats build-gpu/bin/tessera bench --device cuda \
          --model $q/$type.gguf --prompt 64 --decode 8 >"$OUT/details-gguf-$type.txt" 2>/dev/null
        awk '/^  [a-z].*quant_matmul_kernel</ { k = $0; sub(/.*quant_matmul_kernel/, "", k); sub(/\(const.*\) \(/, " (", k)
               sub(/x\(.*/, "", k) }
             /DRAM Throughput/ { dram = $NF } /^ +Duration/ { us = $NF } /Issue Slots Busy/ { busy = $NF }
             /^ +Executed Instructions / { printf "  %-22s %7s us %12s warp instructions, issue %6s %%, DRAM %6s %%\n",
               k, us, $NF, busy, dram }' "$OUT/details-gguf-$type.txt" | tee -a "$OUT/profile-gguf-$type.txt"
      done ;;
    bench)
      for shape in llama-3.2-1b llama-3-8b; do
        build-gpu/bin/tessera bench --device cuda --config bench/shapes/$shape.json --random-weights --seed 1 \
          --dtype bf16 2>&1 | tee "$OUT/bench-$shape.log" | grep -E "device|peak|prefill|decode|kv cache|model"
      done
      # Many sequences decoding together (issue 16: 32 and 64 sequences of 512-token prompts).
      for sequences in 32 64; do
        build-gpu/bin/tessera bench --device cuda --config bench/shapes/llama-3-8b.json --random-weights --seed 1 \
          --dtype bf16 --prompt 512 --decode 32 --sequences $sequences 2>&1 | tee "$OUT/bench-8b-x$sequences.log" |
          grep -E "decode x"
      done ;;
    ab)
      # Switches judged in one call: the benches as built and with each of $AB (comma-separated VAR=value,
      # e.g. AB=TESSERA_CUDA_OVERLAP=0), in turn ${ROUNDS:-2} times, batch 1 on both shapes and 64 sequences
      # on the 8B (alternating switches within each round).
      # $AB_SHAPES (default both) limits the batch-1 benches and $AB_SEQUENCES (default 64: e.g.
      # AB_SEQUENCES="32 64") the many sequences'; either set empty runs none of its kind.
      IFS=, read -ra switches <<<"$AB"
      for shape in ${AB_SHAPES-llama-3.2-1b llama-3-8b}; do
        for round in $(seq ${ROUNDS:-2}); do
          for with in - "${switches[@]}"; do
            echo "== $shape ${with/-/as built}"
            env ${with/-/} build-gpu/bin/tessera bench --device cuda --config bench/shapes/$shape.json --random-weights \
              --seed 1 --dtype bf16 2>&1 | grep -E "^(prefill|decode|cuda graphs)"
          done
        done
      done
      for round in $(seq ${ROUNDS:-2}); do
        for sequences in ${AB_SEQUENCES-64}; do
          for with in - "${switches[@]}"; do
            echo "== llama-3-8b x$sequences ${with/-/as built}"
            env ${with/-/} build-gpu/bin/tessera bench --device cuda --config bench/shapes/llama-3-8b.json \
              --random-weights --seed 1 --dtype bf16 --prompt 512 --decode 32 --sequences $sequences 2>&1 |
              grep -E "decode x|cuda graphs"
          done
        done
      done ;;
    moe)
      # MoE batch-1 decode (issue 18, point 4; docs/benchmarks.md): Qwen3-30B-A3B's shape cut to 12 layers, as built
      # and with each of $AB (comma-separated VAR=value) in turn, ${ROUNDS:-2} times.
      python3 -c "import json; c = json.load(open('bench/shapes/qwen3-30b-a3b.json')); c['num_hidden_layers'] = 12
json.dump(c, open('/tmp/qwen3-30b-a3b-12l.json', 'w'))"
      IFS=, read -ra switches <<<"${AB:-}"
      for round in $(seq ${ROUNDS:-2}); do
        for with in - "${switches[@]}"; do
          echo "== qwen3-30b-a3b 12 layers ${with/-/as built}"
          env ${with/-/} build-gpu/bin/tessera bench --device cuda --config /tmp/qwen3-30b-a3b-12l.json --random-weights \
            --seed 1 --dtype bf16 --threads 16 --prompt 64 --decode 32 2>&1 | grep -E "^(prefill|decode)"
        done
      done ;;
    serve)
      # tessera serve on the 8B shape at concurrency 1, 8, 32 and 64 against tessera generate alone
      # (issue 17 point 10; tools/gpu/serve_bench.sh: needs Llama 3's tokenizer in .prev/tokenizer-llama3).
      tools/gpu/serve_bench.sh ;;
  esac
done
