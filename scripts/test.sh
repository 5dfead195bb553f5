#!/usr/bin/env bash
# The whole test suite: formatting, lints with warnings as errors, and every
# test (unit, scenario and doc tests) in one shared debug build, then the MPI
# tests under a real `mpiexec` (MPICH) with `--features mpi`.
# Installs what it needs first (cargo components; MPICH and libclang from
# apt), so it runs on a fresh machine.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }

step "checking the toolchain"
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

step "checking MPI (mpich, libmpich-dev, libclang-dev)"
missing=()
command -v mpicc >/dev/null 2>&1 || missing+=(mpich libmpich-dev)
command -v mpiexec >/dev/null 2>&1 || missing+=(mpich)
ls /usr/lib/llvm-*/lib/libclang*.so* >/dev/null 2>&1 || missing+=(libclang-dev)
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "installing ${missing[*]}"
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends \
    "${missing[@]}" build-essential
fi
mpiexec --version | head -n 2

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy -D warnings (default features, then with MPI)"
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo clippy -p executors --all-targets --locked --features mpi -- -D warnings

step "the default build does not link MPI"
if cargo tree --workspace --locked -e normal | grep -q "mpi-sys"; then
  echo "test.sh: the default build depends on mpi-sys; MPI must stay behind the \`mpi\` feature" >&2
  exit 1
fi

step "cargo test (default features)"
cargo test --workspace --locked

# Rebuilds only the executors crate and its tests; everything else is shared.
step "cargo test -p executors --features mpi (real mpiexec -n 3)"
cargo test -p executors --locked --features mpi

step "all tests passed"
