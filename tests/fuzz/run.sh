#!/usr/bin/env bash
# Builds the libFuzzer targets (every tests/fuzz/fuzz_*.cpp) with clang 14 over the sans-IO
# sources and runs each for a bounded time. This script is the only fuzz build (Meson builds with
# g++; there is no Meson option for it). Targets build and run FUZZ_JOBS at a time. Seeds in tests/fuzz/seeds/<target>/ are read, never
# written. Usage: run.sh ROOT SECONDS_PER_TARGET  (env: FUZZ_BUILD_DIR, default ROOT/build-fuzz; FUZZ_JOBS, default 2)
set -euo pipefail
root=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
seconds=${2:-20}
out=${FUZZ_BUILD_DIR:-$root/build-fuzz}
jobs_max=${FUZZ_JOBS:-2}
cxx=clang++-14
# UB findings abort the target (a report alone would leave the fuzzer's exit status 0).
flags=(-std=c++20 -O1 -g -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined
       -I"$root/include" -I"$root/lib" -DBOOST_ASIO_NO_DEPRECATED -DBOOST_ENABLE_ASSERT_DEBUG_HANDLER)
# Objects are kept per set of flags: a build directory reused after the flags changed never mixes them.
obj_dir="$out/obj-$(printf '%s\n' "${flags[@]}" | cksum | cut -d' ' -f1)"
mkdir -p "$obj_dir" "$out/corpus"
rm -f "$obj_dir/failed"
objs=()
for src in "$root"/lib/error.cpp "$root"/lib/util/boost_assert.cpp "$root"/lib/proto/*.cpp "$root"/lib/local/spdy.cpp "$root"/lib/files/text.cpp \
           "$root"/lib/util/json_access.cpp "$root"/lib/connection/http1.cpp "$root"/lib/connection/gateway_address.cpp \
           "$root"/lib/sandbox/runtime_protocol.cpp "$root"/lib/sandbox/shell_session_core.cpp \
           "$root"/lib/util/large_string.cpp; do
  obj="$obj_dir/$(basename "$src" .cpp).o"
  # Always compiled (a header change is not seen by comparing the .cpp alone); an object is only
  # kept when its compile succeeded, and a failure is recorded for after the wait.
  rm -f "$obj"
  { "$cxx" "${flags[@]}" -c "$src" -o "$obj.tmp" && mv "$obj.tmp" "$obj"; } || echo "$src" >>"$obj_dir/failed" &
  while (( $(jobs -r | wc -l) >= jobs_max )); do wait -n || true; done
  objs+=("$obj")
done
wait
if [ -s "$obj_dir/failed" ]; then
  echo "FUZZ FAILURE: these sources do not compile:"; cat "$obj_dir/failed"; rm -f "$obj_dir/failed"
  exit 1
fi
libs=(-lyaml-cpp -lboost_json -lboost_url -lssl -lcrypto -lz)
# One target: link, run for the time given; its report goes to $out/NAME.report, which is printed in
# target order once every lane is done, so parallel lanes never interleave their output.
fuzz_one() {
  local target=$1 name
  name=$(basename "$target" .cpp)
  {
    if ! "$cxx" "${flags[@]}" -fsanitize=fuzzer "$target" "${objs[@]}" "${libs[@]}" -o "$out/$name"; then
      echo "FUZZ FAILURE in $name: does not build"
      return 1
    fi
    mkdir -p "$out/corpus/$name"
    local corpora=("$out/corpus/$name")
    [ -d "$root/tests/fuzz/seeds/$name" ] && corpora+=("$root/tests/fuzz/seeds/$name")
    echo "-- $name for ${seconds}s"
    if ! "$out/$name" -max_total_time="$seconds" -max_len=65536 -timeout=10 -rss_limit_mb=2048 \
         -print_final_stats=1 "${corpora[@]}" >"$out/$name.log" 2>&1; then
      echo "FUZZ FAILURE in $name:"; tail -40 "$out/$name.log"
      return 1
    fi
    grep -E 'stat::number_of_executed_units' "$out/$name.log" || true
  } >"$out/$name.report" 2>&1
  echo ok >"$out/$name.ok"
}
targets=("$root"/tests/fuzz/fuzz_*.cpp)
for target in "${targets[@]}"; do
  rm -f "$out/$(basename "$target" .cpp).ok"
  fuzz_one "$target" &
  while (( $(jobs -r | wc -l) >= jobs_max )); do wait -n || true; done
done
wait
status=0
for target in "${targets[@]}"; do
  name=$(basename "$target" .cpp)
  cat "$out/$name.report" 2>/dev/null || true
  [ -f "$out/$name.ok" ] || status=1
done
exit $status
