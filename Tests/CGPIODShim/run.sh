#!/usr/bin/env bash
# Builds the CGPIOD target's C file and shim_check.c against libgpiod with -Wall -Wextra -Werror
# and runs the checks that need no GPIO chip. Ends with "N passed, N failed".
#
#     bash Tests/CGPIODShim/run.sh [OUT_DIR]
#
# OUT_DIR keeps the binary (default: a new temporary directory).
# GPIOD_PREFIX=DIR builds against DIR/include/gpiod.h and DIR/lib/libgpiod.so (e.g. a libgpiod 2.x
# built from source) instead of the system's libgpiod found by pkg-config. CC picks the compiler.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
out="${1:-$(mktemp -d)}"
mkdir -p "$out"

if [ -n "${GPIOD_PREFIX:-}" ]; then
    cflags=(-I"$GPIOD_PREFIX/include")
    libs=(-L"$GPIOD_PREFIX/lib" "-Wl,-rpath,$GPIOD_PREFIX/lib" -lgpiod)
else
    read -r -a cflags <<<"$(pkg-config --cflags libgpiod)"
    read -r -a libs <<<"$(pkg-config --libs libgpiod)"
fi

set -x
"${CC:-cc}" -std=c11 -Wall -Wextra -Werror -I"$repo/Sources/CGPIOD/include" "${cflags[@]}" \
    "$here/shim_check.c" "$repo/Sources/CGPIOD/gpiod.c" -o "$out/shim_check" "${libs[@]}"
"$out/shim_check"
