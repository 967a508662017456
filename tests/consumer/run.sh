#!/usr/bin/env bash
# Builds tests/consumer with kubesandbox pulled in through a wrap file pointing at this checkout.
set -euo pipefail
root=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp "$root/tests/consumer/meson.build" "$root/tests/consumer/consumer.cpp" "$work/"
mkdir -p "$work/subprojects"
cat > "$work/subprojects/kubesandbox.wrap" <<WRAP
[wrap-git]
url = $root
revision = HEAD
depth = 1

[provide]
dependency_names = kubesandbox
WRAP
cd "$work"
meson setup build >/dev/null
ninja -C build
meson test -C build --print-errorlogs
