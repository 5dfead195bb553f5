#!/usr/bin/env bash
# The whole test suite: formatting, lints with warnings as errors, and every
# test (unit, scenario and doc tests) in one shared debug build, then the MPI
# tests under a real `mpiexec` (MPICH) with `--features mpi`.
# Installs what it needs first (cargo components; MPICH, libclang, a C
# toolchain and openssh-server from apt; slurm-wlm and munge through
# scripts/slurm-local.sh, which runs a real single-node Slurm for the
# glide-in tests and is stopped on exit; NVIDIA's NVRTC from PyPI into
# target/nvrtc-venv, so the CUDA kernels are compiled without a GPU), so it
# runs on a fresh machine.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }

step "checking the toolchain"
df -h . | tail -n 1 | awk '{ print "disk: " $4 " free of " $2 }' 
if ! command -v cargo >/dev/null 2>&1; then
  echo "test.sh: cargo is not installed; install Rust (https://rustup.rs) and run again" >&2
  exit 1
fi
for component in rustfmt clippy; do
  if ! cargo "${component/rustfmt/fmt}" --version >/dev/null 2>&1; then
    rustup component add "$component"
  fi
done
cargo --version

step "checking MPI (mpich, libmpich-dev, libclang-dev), a C toolchain (cfitsio is built from source), openssh-server and python3-venv"
missing=()
if command -v dpkg >/dev/null 2>&1; then
  # openssh-server: the ssh glide-in test (gluein/tests/ssh.rs) runs its own
  # sshd on a free loopback port; the system's sshd, started or not by the
  # package, is not used and does not get in the way.
  # python3-venv: the GPU step installs NVIDIA's NVRTC wheel into a venv.
  for package in mpich libmpich-dev libclang-dev openssh-server python3-venv; do
    # `dpkg -s` also succeeds for removed packages whose config files remain.
    status=$(dpkg-query -W -f='${Status}' "$package" 2>/dev/null || true)
    [ "$status" = "install ok installed" ] || missing+=("$package")
  done
  # The supernova app's FITS library (cfitsio) builds with make and cc.
  command -v make >/dev/null 2>&1 && command -v cc >/dev/null 2>&1 || missing+=(build-essential)
elif ! command -v mpicc >/dev/null 2>&1; then
  echo "test.sh: no mpicc and no apt to install MPICH; install an MPI (mpich) and libclang" >&2
  exit 1
fi
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "installing ${missing[*]}"
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends \
    "${missing[@]}" build-essential
fi
if [ ! -x /usr/sbin/sshd ]; then
  echo "test.sh: no /usr/sbin/sshd; install openssh-server (the ssh glide-in test runs its own sshd)" >&2
  exit 1
fi
mpiexec --version 2>&1 | sed -n 1,2p

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy -D warnings (default features, then with MPI)"
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo clippy -p executors --all-targets --locked --features mpi -- -D warnings

step "constellation builds without its network stack (the model, the core, the node protocol and the simulator need no libp2p or tokio)"
cargo clippy -p constellation --lib --locked --no-default-features -- -D warnings

step "the default build does not link MPI"
if cargo tree --workspace --locked -e normal | grep -q "mpi-sys"; then
  echo "test.sh: the default build depends on mpi-sys; MPI must stay behind the \`mpi\` feature" >&2
  exit 1
fi

step "one version of each dependency, except the duplicates upstream crates force"
# `cargo tree --duplicates` names every package built in more than one
# version (a package listed twice in one version, as a proc macro's build
# dependency and as a normal one, is no duplicate and is dropped here). Each
# series below is forced by crates we do not maintain and cannot be removed
# without forking them; our own crates use one of the versions already built:
#   rand 0.8/0.9, rand_core 0.6/0.9, rand_chacha 0.3/0.9, getrandom 0.2/0.3:
#     libp2p 0.56 (libp2p-core, -identity, -noise, -swarm, -pnet, ...) and
#     yamux 0.12 use rand 0.8, as do our crates; yamux 0.13 uses rand 0.9.
#   yamux 0.12/0.13: libp2p-yamux 0.47 builds both, the old one for peers
#     that still speak it.
#   thiserror 1/2, thiserror-impl 1/2: quick-protobuf-codec 0.3
#     (libp2p-identify) and rtnetlink 0.20 (if-watch, under libp2p-tcp) use 1;
#     libp2p itself and our crates use 2.
#   unsigned-varint 0.7/0.8: multistream-select 0.13 (libp2p-core) uses 0.7,
#     libp2p-core 0.8.
#   syn 2/3: the proc macros of libp2p-swarm-derive, thiserror-impl 1,
#     tracing-attributes, pin-project, prost-derive, curve25519-dalek-derive,
#     zerocopy and zeroize use 2; those of serde, clap, tokio, futures,
#     typetag, async-trait and thiserror-impl 2 use 3.
#   hashbrown 0.15/0.17: hashlink 0.10 (rusqlite, libp2p-swarm) uses 0.15,
#     indexmap 2 (toml) 0.17.
#   bitflags 1/2, miniz_oxide 0.8/0.9: png 0.17 (tiny-skia, under resvg, which
#     rasterizes the report's plots) uses the older ones.
#   rand 0.10, rand_core 0.10: foca 2 (SWIM membership in constellation's
#     protocol::Node) draws its random numbers through rand_core 0.10, so the
#     node hands it a generator implementing that trait; everything else of
#     ours stays on rand 0.8.
# getrandom 0.4 is in Cargo.lock but never built: libp2p's `tokio` feature
# names `libp2p-quic?/tokio`, and Cargo locks an optional crate named in such
# a weak feature (here quinn-proto's) without building it.
# A new duplicate fails this step: make our crate use the version already
# built, or add the series here with the crate that forces it.
upstream_duplicates="bitflags 1
bitflags 2
getrandom 0.2
getrandom 0.3
hashbrown 0.15
hashbrown 0.17
miniz_oxide 0.8
miniz_oxide 0.9
rand 0.8
rand 0.9
rand 0.10
rand_chacha 0.3
rand_chacha 0.9
rand_core 0.6
rand_core 0.9
rand_core 0.10
syn 2
syn 3
thiserror 1
thiserror 2
thiserror-impl 1
thiserror-impl 2
unsigned-varint 0.7
unsigned-varint 0.8
yamux 0.12
yamux 0.13"
# "rand v0.8.8" -> "rand 0.8", "thiserror v2.0.17" -> "thiserror 2": one line
# per semver-compatible series, so that `cargo update` changes nothing here.
duplicates=$(cargo tree --workspace --locked -e normal,build,dev --duplicates --prefix none --format '{p}' \
  | awk 'NF { print $1, $2 }' | sort -u \
  | awk '{ count[$1]++; line[NR] = $0; name[NR] = $1 }
         END { for (i = 1; i <= NR; i++) if (count[name[i]] > 1) print line[i] }' \
  | sed -E 's/ v(0\.[0-9]+|[1-9][0-9]*)\..*/ \1/' | sort -u)
unexpected=$(comm -23 <(printf '%s\n' "$duplicates") <(printf '%s\n' "$upstream_duplicates" | sort))
if [ -n "$unexpected" ]; then
  echo "test.sh: built in a second version, and not forced by libp2p or another upstream crate:" >&2
  printf '%s\n' "$unexpected" | sed 's/^/  /' >&2
  echo "  make our crates use the version already built (cargo tree -i NAME@VERSION shows who pulls each)," >&2
  echo "  or list the series in scripts/test.sh with the crate that forces it" >&2
  exit 1
fi
gone=$(comm -13 <(printf '%s\n' "$duplicates") <(printf '%s\n' "$upstream_duplicates" | sort))
[ -z "$gone" ] || echo "no longer duplicated (may leave the list in scripts/test.sh): $(echo $gone)"

step "starting a local Slurm for the glide-in tests (scripts/slurm-local.sh; stopped on exit)"
trap 'bash scripts/slurm-local.sh stop || true' EXIT
eval "$(bash scripts/slurm-local.sh start)"
export CONSTELLATION_REQUIRE_SLURM=1
export CONSTELLATION_REQUIRE_SSHD=1
sinfo

step "cargo test (default features)"
# --no-fail-fast: one CI log shows every failing suite, not just the first.
cargo test --workspace --locked --no-fail-fast

# NVRTC needs no GPU, so the CUDA kernels (the executors' and supernova's
# step 7.2) are compiled here for real: PTX, and machine code for sm_70,
# sm_80 and sm_90. NVRTC comes from NVIDIA's PyPI wheel, in a virtual
# environment under target/ (ignored by git, kept between runs); cudarc
# dlopens it as libnvrtc.so.12 from LD_LIBRARY_PATH.
# CONSTELLATION_REQUIRE_NVRTC=1 turns "skipped: no NVRTC" into a failure, so
# this step cannot pass by skipping. Tests that need a driver still skip and
# say why.
step "1,000 nodes learn each other through SWIM on virtual time (protocol::Node; release: 9 s of CPU there, 2 min in debug)"
cargo test -p constellation --lib --release --locked --no-default-features -- \
  --exact protocol::tests::membership::a_thousand_nodes_learn_each_other --nocapture

step "membership under load: fifty_nodes_learn_each_other, 10 of 10 runs with every core busy (scripts/membership-under-load.sh)"
# A node starved of CPU is suspected and refutes it; it is never excluded for
# good. The test binary is the one cargo test --workspace built above (same
# features, so nothing is compiled); FAIL_FAST stops at the first failure.
RUNS=10 FAIL_FAST=1 bash scripts/membership-under-load.sh

step "local attacks as another user (scripts/attack-local.sh: planted keys, state and locks; jobs that never end; unbounded input; a killed runner's queued work)"
# Against the debug build that cargo test made above (same code, same
# features): a release build from scratch would add about 15 minutes.
ATTACK_BINARY=target/debug/constellation bash scripts/attack-local.sh

step "GPU tests with NVRTC (nvidia-cuda-nvrtc-cu12 in target/nvrtc-venv), with their output"
nvrtc_venv=target/nvrtc-venv
if [ ! -x "$nvrtc_venv/bin/pip" ]; then
  python3 -m venv "$nvrtc_venv"
fi
"$nvrtc_venv/bin/pip" install --quiet --disable-pip-version-check 'nvidia-cuda-nvrtc-cu12>=12.2,<13'
nvrtc_lib=$("$nvrtc_venv/bin/python" -c \
  'import nvidia.cuda_nvrtc, os; print(os.path.join(list(nvidia.cuda_nvrtc.__path__)[0], "lib"))')
if [ ! -e "$nvrtc_lib/libnvrtc.so.12" ]; then
  echo "test.sh: the nvidia-cuda-nvrtc-cu12 wheel has no $nvrtc_lib/libnvrtc.so.12" >&2
  exit 1
fi
echo "NVRTC: $nvrtc_lib/libnvrtc.so.12"
# Rebuilds only the executors crate and its tests; everything else is shared.
# Passing tests hide their output; show why the GPU tests skipped, if they did.
# --workspace, not -p: selecting one package makes cargo resolve features
# for it alone and rebuild libp2p and constellation a second time (about a
# minute and a gigabyte of target/ for nothing).
gpu_status=0
LD_LIBRARY_PATH="$nvrtc_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" CONSTELLATION_REQUIRE_NVRTC=1 \
  cargo test --workspace --locked --test gpu -- --nocapture >target/gpu-tests.log 2>&1 || gpu_status=$?
LD_LIBRARY_PATH="$nvrtc_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" CONSTELLATION_REQUIRE_NVRTC=1 \
  cargo test --workspace --locked --lib -- --nocapture gpu::tests >>target/gpu-tests.log 2>&1 || gpu_status=$?
grep -E "^(skipped|compiled|test result)|panicked|CONSTELLATION_REQUIRE_NVRTC" target/gpu-tests.log | sort | uniq -c || true
if [ "$gpu_status" -ne 0 ]; then
  # CI keeps only this script's output, so the reason must be printed here.
  echo "test.sh: the GPU tests failed (cargo exited $gpu_status); the end of target/gpu-tests.log:" >&2
  grep -v -E "^ +(Compiling|Downloaded|Downloading) " target/gpu-tests.log | tail -n 60 >&2 || true
  df -h . >&2 || true
  exit "$gpu_status"
fi

step "cargo test -p executors --features mpi (real mpiexec -n 3)"
cargo test -p executors --locked --features mpi

step "all tests passed"
