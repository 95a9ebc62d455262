#!/usr/bin/env bash
# Carry a dlaunch build to a GPU machine that has CUDA and NCCL but none of
# dlaunch's other libraries (no package registry there), and run the NCCL
# checks on it.
#
#   scripts/gpu-bundle.sh pack [PRESET]   here: build PRESET (default release)
#       and put the programs the NCCL checks need, stripped, with the shared
#       libraries ldd names for them (minus the C/C++ runtime and CUDA/NCCL,
#       which the GPU machine has), into .gpu/ (git-ignored)
#   scripts/gpu-bundle.sh run [STEP...]   there, in a copy of the repository
#       holding .gpu/: put the programs where the build would be, pick up the
#       machine's own libcudart/libnccl, and run the checks (default: all).
#       Each step's log goes to .gpu/out/; the summary and all logs, one after
#       another, also go to $OUT (the device tool brings back only a few files).
#
# Steps of `run`: probe, health (the agent's facts through NVML, its GPU
# test on the real driver, and --check), tests (nccl_tests), train (examples/train --backend
# nccl on one GPU and on two ranks), torch (examples/train.py with NCCL, if
# PyTorch with CUDA is there), bench (allreduce_bench --compare --check from
# 1 KiB to 1 GiB), watchdog (a collective one rank never calls, then
# nvidia-smi).
#
# With one GPU, NCCL refuses two ranks on it ("Duplicate GPU detected") when
# they look like one host. The multi-rank steps therefore run on two logical
# nodes of this machine that each use GPU 0 and tell NCCL they are different
# hosts (NCCL_HOSTID), talking over loopback sockets: every multi-rank code
# path of comm runs, at socket rather than NVLink speed.
set -euo pipefail
cd "$(dirname "$0")/.."

bundle=.gpu
programs=(dlaunch dlaunch-agent nccl_worker nccl_tests train allreduce_bench hello)

pack() {
  local preset=${1:-release}
  scripts/dev.sh build "$preset"
  local bin=build/$preset/bin
  rm -rf "$bundle"
  mkdir -p "$bundle/bin" "$bundle/lib"
  for p in "${programs[@]}"; do
    strip --strip-debug -o "$bundle/bin/$p" "$bin/$p"
  done
  # Libraries of Debian's that the programs need, not the ones every Linux
  # or every CUDA machine has: a carried libstdc++ older than the GPU
  # machine's would break its PyTorch.
  local skip='^(linux-vdso|ld-linux|libc\.|libm\.|libdl\.|libpthread\.|librt\.|libstdc\+\+|libgcc_s|libcudart|libnccl|libcuda\.)'
  for p in "${programs[@]}"; do
    ldd "$bin/$p" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}'
  done | sort -u | while read -r name path; do
    [[ $name =~ $skip ]] && continue
    cp -L "$path" "$bundle/lib/$name"
  done
  echo "$preset" >"$bundle/preset"
  pwd >"$bundle/root"
  du -sh "$bundle" | awk '{print "gpu-bundle: " $1 " in '"$bundle"'/"}'
}

# ---------------------------------------------------------------- run, there

out=$bundle/out
report=${OUT:-$out}

note() { echo "$*" | tee -a "$report/summary.txt"; }

# The directory holding `lib`, searched for the machine's CUDA runtime and NCCL.
find_lib() {
  local name=$1 d
  for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib \
    $(python3 - <<'EOF' 2>/dev/null
import glob, site, os
for s in site.getsitepackages():
    for d in glob.glob(os.path.join(s, "nvidia", "*", "lib")):
        print(d)
EOF
    ); do
    if compgen -G "$d/$name*" >/dev/null; then
      echo "$d"
      return 0
    fi
  done
  ldconfig -p | awk -v n="$name" '$1 ~ "^" n {print $NF; exit}' | xargs -r dirname
}

setup() {
  mkdir -p "$out" "$report"
  rm -f "$out"/*.log
  : >"$report/summary.txt"
  local preset
  preset=$(cat "$bundle/preset")
  # The tests name programs and sources by the absolute paths of the build
  # machine's checkout: make those paths lead here.
  local root
  root=$(cat "$bundle/root")
  if [[ -n $root && $root != "$PWD" && ! -e $root ]]; then
    mkdir -p "$(dirname "$root")"
    ln -sfn "$PWD" "$root"
  fi
  mkdir -p "build/$preset"
  rm -rf "build/$preset/bin"
  cp -a "$bundle/bin" "build/$preset/bin"
  BIN=$PWD/build/$preset/bin
  # Only the carried libraries the machine lacks.
  mkdir -p "$bundle/ld"
  rm -f "$bundle/ld"/*
  local f
  for f in "$bundle"/lib/*; do
    ldconfig -p | grep -q "^[[:space:]]*$(basename "$f") " || ln -sf "$PWD/$f" "$bundle/ld/"
  done
  local cudart nccl
  cudart=$(find_lib libcudart.so.13)
  nccl=$(find_lib libnccl.so.2)
  export LD_LIBRARY_PATH=$PWD/$bundle/ld${cudart:+:$cudart}${nccl:+:$nccl}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  note "carried libraries used: $(find "$bundle/ld" -mindepth 1 -printf '%f ')"
  note "libcudart from ${cudart:-?}, libnccl from ${nccl:-?}"
}

# The two-logical-node hostfile: both nodes on GPU 0, each its own NCCL host.
two_node_hostfile() {
  cat >"$bundle/two-nodes-one-gpu.yaml" <<'EOF'
# Two logical nodes on this machine sharing GPU 0; NCCL_HOSTID makes NCCL
# treat them as two hosts (net transport over loopback) instead of refusing
# two ranks on one GPU.
hosts:
  - host: localhost
    name: gpu-a
    slots: 1
    gpus: [0]
    env: {NCCL_HOSTID: dlaunch-gpu-a, NCCL_SOCKET_IFNAME: lo}
  - host: localhost
    name: gpu-b
    slots: 1
    gpus: [0]
    env: {NCCL_HOSTID: dlaunch-gpu-b, NCCL_SOCKET_IFNAME: lo}
EOF
  echo "$bundle/two-nodes-one-gpu.yaml"
}

# step NAME TIMEOUT CMD...: run, log to $out/NAME.log, note the result.
step() {
  local name=$1 limit=$2 start=$SECONDS rc=0
  shift 2
  echo "== $name: $*" >>"$out/$name.log"
  timeout -k 5 "$limit" "$@" >>"$out/$name.log" 2>&1 || rc=$?
  note "$name: exit $rc in $((SECONDS - start)) s: $*"
  [[ $report == "$out" ]] || cat "$out/$name.log" >>"$report/all.log"
  return 0
}

gpus_left() {
  nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader 2>&1
}

run_steps() {
  local steps=("$@")
  [[ ${#steps[@]} -gt 0 ]] || steps=(probe health tests train watchdog bench torch)
  setup
  local two gpus
  two=$(two_node_hostfile)
  gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
  note "GPUs: $gpus"
  for s in "${steps[@]}"; do
    case $s in
      probe)
        {
          nvidia-smi
          uname -a
          ldd "$BIN/nccl_worker"
          "$BIN/dlaunch" --version
          "$BIN/nccl_worker" devices
          python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.cuda.is_available(), "nccl", torch.cuda.nccl.version())'
        } >"$out/probe.log" 2>&1 || true
        [[ $report == "$out" ]] || cat "$out/probe.log" >>"$report/all.log"
        ;;
      health)
        # The node's facts through the real NVML, the GPU test's kernels on
        # the real driver (docs/health.md), and --check judging them.
        step health-facts 60 "$BIN/dlaunch-agent" --health "$PWD"
        step gpu-test 60 env CUDA_DEVICE_ORDER=PCI_BUS_ID "$BIN/dlaunch-agent" --gpu-test 512
        step check 120 "$BIN/dlaunch" --check -H hostfiles/localhost.yaml true
        grep -h "^health\.\(nvml\|gpu_count\|gpu_driver\|cuda\)" "$out"/health-facts.log "$out"/gpu-test.log |
          tee -a "$report/summary.txt" || true
        tail -n 4 "$out/check.log" | tee -a "$report/summary.txt" || true
        ;;
      tests)
        step tests 280 "$BIN/nccl_tests" --gtest_color=no
        grep -E '^\[ *(OK|FAILED|SKIPPED|PASSED) *\]|Skipped|skip' "$out/tests.log" | tee -a "$report/summary.txt" || true
        ;;
      train)
        step train-1gpu 120 "$BIN/dlaunch" -n 1 "$BIN/train" --backend nccl
        step train-2ranks 180 "$BIN/dlaunch" -H "$two" "$BIN/train" --backend nccl
        if [[ $gpus -ge 2 ]]; then
          step train-allgpus 180 "$BIN/dlaunch" -n "$gpus" "$BIN/train" --backend nccl
        fi
        grep -h "parameters identical\|loss" "$out"/train-*.log | tail -n 6 | tee -a "$report/summary.txt" || true
        ;;
      torch)
        if python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
          step torch-1gpu 180 "$BIN/dlaunch" -n 1 python3 examples/train.py --backend nccl
          step torch-2ranks 240 "$BIN/dlaunch" -H "$two" python3 examples/train.py --backend nccl
          tail -n 3 "$out"/torch-*.log | tee -a "$report/summary.txt" || true
        else
          note "torch: no PyTorch with CUDA here"
        fi
        ;;
      bench)
        step bench-1gpu 300 "$BIN/dlaunch" -n 1 "$BIN/allreduce_bench" --backend nccl --compare \
          --check --min-bytes 1K --max-bytes 1G --iters 50 --warmup 10 --rounds 6
        step bench-2ranks 400 "$BIN/dlaunch" -H "$two" "$BIN/allreduce_bench" --backend nccl \
          --compare --check --min-bytes 1K --max-bytes 256M --iters 10 --warmup 3 --rounds 4
        grep -h "^  \|Out of bounds\|Avg bus" "$out"/bench-*.log | tee -a "$report/summary.txt" || true
        ;;
      watchdog)
        # The first collective with a peer that never connects (NCCL reports
        # it in progress), then one after a completed collective (the kernel
        # waits on the GPU): each must end in about 5 s, nothing left behind.
        local before after mode
        for mode in stuck-connect stuck-collective; do
          before=$(gpus_left)
          step "watchdog-$mode" 60 "$BIN/dlaunch" -H "$two" --collective-timeout 5 \
            "$BIN/nccl_worker" "$mode"
          tail -n 8 "$out/watchdog-$mode.log" | tee -a "$report/summary.txt"
          sleep 1
          after=$(gpus_left)
          note "GPU processes before: ${before:-none}; after: ${after:-none}"
        done
        ;;
      *) note "unknown step $s" ;;
    esac
  done
}

case ${1:-} in
  pack) pack "${2:-}" ;;
  run)
    shift
    run_steps "$@"
    ;;
  *)
    sed -n '2,/^set -euo/p' "$0" | sed '$d' >&2
    exit 2
    ;;
esac
