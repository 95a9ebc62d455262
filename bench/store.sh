#!/usr/bin/env bash
# Store throughput: T client threads, each with its own connection, each doing
# N rounds of set then get on keys of its own (every set and get is one op),
# against dlaunch's store (store_bench, in-process server on loopback) and, when
# python3 can import torch, against torch.distributed.TCPStore with the same
# workload from T Python threads (TCPStore releases the GIL in set/get).
# Prints ops/s for each and the ratio dlaunch/TCPStore (higher is better).
#
#   bench/store.sh [--threads 64] [--ops 2000] [--value-bytes 32] [--build build/release]
set -euo pipefail
cd "$(dirname "$0")/.."

threads=64; ops=2000; value_bytes=32; build=build/release
while [[ $# -gt 0 ]]; do
  case $1 in
    --threads) threads=$2; shift 2 ;;
    --ops) ops=$2; shift 2 ;;
    --value-bytes) value_bytes=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done

bin=$build/bin/store_bench
if [[ ! -x $bin ]]; then
  [[ $build == build/release ]] || { echo "$bin not built" >&2; exit 1; }
  cmake --preset release >/dev/null
  cmake --build build/release --target store_bench >/dev/null
fi

echo "Store: $threads client threads x $ops rounds of set+get, ${value_bytes}-byte values," \
  "loopback, $(nproc) cores"
dl_line=$("$bin" --threads "$threads" --ops "$ops" --value-bytes "$value_bytes")
echo "$dl_line"
dl_ops=$(sed -n 's/.*: \([0-9.]*\) ops\/s$/\1/p' <<<"$dl_line")

# Debian's python3-torch belongs to /usr/bin/python3, which may not be the
# first python3 on PATH (pyenv, venvs): take the first that imports torch.
py=""
for candidate in python3 /usr/bin/python3; do
  if "$candidate" -c "import torch" >/dev/null 2>&1; then py=$candidate; break; fi
done
if [[ -z "$py" ]]; then
  echo "torch.distributed.TCPStore: skipped (no python3 here can import torch; apt-get install python3-torch)"
  exit 0
fi

torch_line=$("$py" - "$threads" "$ops" "$value_bytes" <<'EOF'
import datetime, socket, sys, threading, time
import torch
from torch.distributed import TCPStore

threads, ops, value_bytes = (int(a) for a in sys.argv[1:4])
timeout = datetime.timedelta(seconds=300)
with socket.socket() as s:  # a free port; TCPStore's own port 0 support varies by version
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
server = TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False, timeout=timeout)
clients = [TCPStore("127.0.0.1", port, is_master=False, timeout=timeout) for _ in range(threads)]
value = b"v" * value_bytes
start_line = threading.Barrier(threads + 1)
errors = []

def work(t):
    c = clients[t]
    start_line.wait()
    for i in range(ops):
        key = f"bench/{t}/{i}"
        c.set(key, value)
        if c.get(key) != value:
            errors.append(key)

workers = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
for w in workers:
    w.start()
start_line.wait()
start = time.perf_counter()
for w in workers:
    w.join()
secs = time.perf_counter() - start
if errors:
    sys.exit(f"TCPStore: {len(errors)} gets returned a wrong value")
total = 2 * threads * ops
backend = "libuv" if getattr(server, "libuvBackend", False) else "classic"
print(f"torch {torch.__version__} TCPStore ({backend} server): {threads} threads x {ops} (set+get)"
      f" = {total} ops in {secs:.3f} s: {total / secs:.0f} ops/s")
EOF
)
echo "$torch_line"
torch_ops=$(sed -n 's/.*: \([0-9.]*\) ops\/s$/\1/p' <<<"$torch_line")
awk -v d="$dl_ops" -v t="$torch_ops" 'BEGIN { printf "ratio dlaunch/TCPStore: %.2f\n", d / t }'
