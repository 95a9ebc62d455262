#!/usr/bin/env bash
# Installs the Debian packages dlaunch needs to build and test, if missing.
# Uses sudo when not root. Nothing is downloaded from anywhere but apt.
set -euo pipefail

# What building dlaunch and running a job needs (`install-deps.sh hello`).
packages=(
  build-essential cmake ninja-build pkg-config ccache
  libyaml-cpp-dev libboost-dev libcli11-dev libfmt-dev
  libssh2-1-dev libssl-dev
  libopenmpi-dev openmpi-bin libpmix-dev
  libhwloc-dev  # placement: the node topology for --bind-to, --map-by, --report-bindings
  zlib1g-dev  # the head packs an agent that has no dlaunch-agent.gz beside it
)
# What the test suite, the lint and the fuzzers need besides (the default).
test_packages=(
  libgtest-dev libgmock-dev
  openssh-server openssh-client  # the SSH tests run their own sshd on loopback
  # scripts/fuzz.sh: clang with libFuzzer and the sanitizer runtimes (only a
  # Recommends of clang-14, so named here), llvm-symbolizer for its reports
  clang libclang-rt-14-dev llvm
  clang-format clang-tidy  # scripts/dev.sh lint
  slurm-wlm munge  # tests/testbed/slurm.sh: single-node Slurm for the slurm tests
  # tests/testbed/sge.sh: single-node Grid Engine for the sge tests
  gridengine-master gridengine-exec gridengine-client
  groff-base man-db dpkg-dev  # man page check (groff, man -l), cpack -G DEB (dpkg-shlibdeps)
  python3-torch  # examples/train.py and the PyTorch tests (run with /usr/bin/python3)
  python3-pytest  # the Python client's tests (python/tests)
  elfutils gdb  # stacks of hanging ranks (dlaunch runs eu-stack, else gdb, on each node)
  iproute2  # tests/testbed/netns.sh: hosts as network namespaces (fault matrix tests)
  # tests/testbed/bare-root.sh: minimal Debian roots for the bare-node bed
  # (nodes with nothing installed; made once, cached in /var/cache/dlaunch-testbed)
  mmdebstrap
  # tests/testbed/podman.sh: the container tests (podman with runc, which
  # this host's cgroups v1 need; an image imported from a static busybox)
  podman runc busybox-static
  uidmap  # tests/testbed/rootless.sh: rootless podman for a user who is not root
  # tests/testbed/registry.sh: a registry on a loopback port, for the pull of
  # a node's image (never a registry elsewhere)
  docker-registry
)

case "${1:-}" in
  hello) ;;
  # `install-deps.sh bench`: also what the benchmarks compare against.
  # python3-mpi4py: bench/mpi4py_dynproc.sh (MPI dynamic processes, mpirun and dlaunch side by side)
  bench) packages+=("${test_packages[@]}" pdsh time hyperfine python3 python3-matplotlib procps
    python3-mpi4py) ;;
  *) packages+=("${test_packages[@]}") ;;
esac

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$p")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

sudo=""
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "install-deps: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  sudo="sudo"
fi
echo "install-deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
# docker-registry's package enables a service on port 5000 of every address:
# the tests start their own on loopback, so the machine's is turned off.
for p in "${missing[@]}"; do
  if [[ "$p" == docker-registry ]] && [[ -d /run/systemd/system ]]; then
    $sudo systemctl disable --now docker-registry >/dev/null 2>&1 || true
  fi
done
