#!/usr/bin/env bash
# Installs the build into a temporary prefix, then builds a user's project
# against it twice: with find_package(sharc) (C99 and C++) and with
# pkg-config, and runs each on 2 ranks.
#   install_test.sh BUILD_DIR SOURCE_DIR
set -u
build=$1 src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
check() { if "$@"; then pass=$((pass + 1)); else echo "FAILED: $*"; fail=$((fail + 1)); fi; }

check cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
check test -f "$tmp/prefix/include/sharc.h"
check test -x "$tmp/prefix/bin/sharcrun"
lib=$(ls -d "$tmp"/prefix/lib*/ | head -1)
check test -f "$lib/cmake/sharc/sharcConfig.cmake"
check test -f "$lib/pkgconfig/sharc.pc"

# find_package
check cmake -S "$src/tests/install" -B "$tmp/consumer" -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
check cmake --build "$tmp/consumer" >/dev/null
export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
check "$tmp/prefix/bin/sharcrun" -n 2 "$tmp/consumer/consumer"
check "$tmp/prefix/bin/sharcrun" -n 2 "$tmp/consumer/consumer_cxx"

# pkg-config
export PKG_CONFIG_PATH="$lib/pkgconfig"
check cc -std=c99 -Wall -Wextra -pedantic -Werror -o "$tmp/pc_consumer" "$src/tests/install/consumer.c" \
  $(pkg-config --cflags --libs sharc)
check "$tmp/prefix/bin/sharcrun" -n 2 "$tmp/pc_consumer"

echo "install_test: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
