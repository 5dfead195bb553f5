#!/usr/bin/env bash
# The whole test suite: formatting, lints with warnings as errors, and every
# test (unit, scenario and doc tests) in one shared debug build.
# Installs what it needs first, so it runs on a fresh machine.
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

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy -D warnings"
cargo clippy --workspace --all-targets --locked -- -D warnings

step "cargo test"
cargo test --workspace --locked

step "all tests passed"
