#!/usr/bin/env bash
# Compile the eBPF programs in bpf/ to build/bpf/*.o (BPF target, with BTF).
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p build/bpf
arch_include="/usr/include/$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)"
for src in bpf/*.bpf.c; do
  out="build/bpf/$(basename "${src%.c}").o"
  clang -O2 -g -Wall -Werror -target bpf -I"$arch_include" -Ibpf -c "$src" -o "$out"
done
echo "bpf: built $(ls build/bpf/*.o | wc -l) object(s) in build/bpf/"
