#!/usr/bin/env bash
# README's first command: installs what is missing, builds the quickstart and the two command-line
# tools (build-quickstart/tools/, used by README's CLI section), and runs the quickstart against
# the embedded local cluster (or against $KUBECONFIG's cluster when KUBECONFIG is set).
set -euo pipefail
cd "$(dirname "$0")/.."
packages=(g++ meson ninja-build pkg-config cmake libboost1.81-dev libboost-json1.81-dev libboost-url1.81-dev
          libssl-dev libexpected-dev libyaml-cpp-dev zlib1g-dev libgtest-dev libbenchmark-dev
          bubblewrap busybox-static util-linux python3)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -q
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
[ -d build-quickstart ] || meson setup build-quickstart -Dtests=false -Dbenchmarks=false >/dev/null
ninja -C build-quickstart examples/quickstart tools/kubesandbox tools/kubesandbox-local
exec build-quickstart/examples/quickstart
