#!/usr/bin/env bash
# Builds tests/consumer with kubesandbox pulled in through a wrap file pointing at this checkout
# (its committed HEAD), runs it, then installs kubesandbox into a temporary prefix and builds
# pkgconfig_consumer.cpp with nothing but `pkg-config --cflags --libs kubesandbox` and the
# quickstart with `pkg-config --cflags --libs kubesandbox-local`.
# Usage: run.sh ROOT [build|check|all]. `build` only compiles (nothing runs, no pods), `check`
# runs and installs what `build` left in $CONSUMER_DIR; `all` (the default) does both in a
# temporary directory unless CONSUMER_DIR names one.
set -euo pipefail
root=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
phase=${2:-all}
case "$phase" in build | check | all) ;; *) echo "run.sh: unknown phase '$phase' (build, check or all)" >&2; exit 2 ;; esac
work=${CONSUMER_DIR:-}
if [ -z "$work" ]; then
  [ "$phase" = all ] || { echo "run.sh: phase $phase needs CONSUMER_DIR" >&2; exit 2; }
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
fi
prefix="$work/prefix"

if [ "$phase" = build ] || [ "$phase" = all ]; then
  mkdir -p "$work/subprojects"
  cp "$root/tests/consumer/meson.build" "$root/tests/consumer/consumer.cpp" "$root/examples/quickstart.cpp" "$work/"
  cat > "$work/subprojects/kubesandbox.wrap" <<WRAP
[wrap-git]
url = $root
revision = HEAD
depth = 1

[provide]
dependency_names = kubesandbox, kubesandbox-local
WRAP
  cd "$work"
  # Optimized as a user's release build is, without debug info (it is never debugged here), and
  # with -Werror on kubesandbox: CI's only build without sanitizers, so warnings that only
  # optimization or a plain toolchain shows fail here.
  if ! meson setup build --prefix "$prefix" -Doptimization=2 -Ddebug=false -Dkubesandbox:werror=true \
       >"$work/setup.log" 2>&1; then
    cat "$work/setup.log"
    exit 1
  fi
  ninja -C build ${CONSUMER_JOBS:+-j "$CONSUMER_JOBS"}
fi

if [ "$phase" = check ] || [ "$phase" = all ]; then
  cd "$work"
  meson test -C build --print-errorlogs

  echo "-- installed kubesandbox through pkg-config"
  meson install -C build --quiet
  pc=$(find "$prefix" -name kubesandbox.pc -print -quit)
  [ -n "$pc" ] || { echo "kubesandbox.pc was not installed under $prefix"; exit 1; }
  export PKG_CONFIG_PATH="$(dirname "$pc")${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
  echo "pkg-config: $(pkg-config --cflags --libs kubesandbox)"
  # shellcheck disable=SC2046  # word splitting of the flags is intended
  "${CXX:-g++}" -Wall -Wextra -Werror -o pkgconfig_consumer "$root/tests/consumer/pkgconfig_consumer.cpp" \
    $(pkg-config --cflags --libs kubesandbox)
  LD_LIBRARY_PATH="$(pkg-config --variable=libdir kubesandbox)" ./pkgconfig_consumer
  echo "pkg-config: $(pkg-config --cflags --libs kubesandbox-local)"
  # shellcheck disable=SC2046
  "${CXX:-g++}" -Wall -Wextra -Werror -o quickstart "$root/examples/quickstart.cpp" \
    $(pkg-config --cflags --libs kubesandbox-local)
fi
