#!/usr/bin/env bash
# The kubesandbox CLI end to end against a kubesandbox-local started here.
# Usage: cli_test.sh PATH/TO/kubesandbox-local PATH/TO/kubesandbox
set -uo pipefail

LOCAL=${1:?usage: cli_test.sh KUBESANDBOX_LOCAL KUBESANDBOX}
KSB=${2:?usage: cli_test.sh KUBESANDBOX_LOCAL KUBESANDBOX}
TMP=$(mktemp -d)
chmod 755 "$TMP"  # pods run as other uids and must reach their data directory
export KUBECONFIG=$TMP/kubeconfig
FAILURES=0
PID=

cleanup() {
    if [[ -n $PID ]] && kill -0 "$PID" 2>/dev/null; then kill -TERM "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null; fi
    rm -rf "$TMP"
}
trap cleanup EXIT

pass() { echo "PASS: $1"; }
fail() { echo "FAIL: $1"; FAILURES=$((FAILURES + 1)); }
K() { timeout 120 "$KSB" "$@"; }

"$LOCAL" --kubeconfig "$KUBECONFIG" --data-dir "$TMP/data" >"$TMP/server.log" 2>&1 &
PID=$!
for _ in $(seq 100); do [[ -s $KUBECONFIG ]] && break; sleep 0.1; done
if [[ ! -s $KUBECONFIG ]]; then echo "FAIL: kubesandbox-local did not write $KUBECONFIG"; cat "$TMP/server.log"; exit 1; fi

# usage errors exit 2
K bogus >/dev/null 2>&1; rc=$?
[[ $rc == 2 ]] && pass "unknown command exits 2" || fail "unknown command exits 2 (got $rc)"
K exec >/dev/null 2>&1; rc=$?
[[ $rc == 2 ]] && pass "exec without id exits 2" || fail "exec without id exits 2 (got $rc)"

# create: id alone on stdout, progress on stderr
ID=$(K create --id "cli test/1" 2>"$TMP/create.err"); rc=$?
if [[ $rc == 0 && $ID == "cli test/1" ]] && grep -q "waiting" "$TMP/create.err"; then pass "create --id"
else fail "create --id (rc=$rc id='$ID')"; sed 's/^/    /' "$TMP/create.err"; fi

RID=$(K create 2>"$TMP/create2.err"); rc=$?
if [[ $rc == 0 && $RID == ksb-* && $(printf '%s\n' "$RID" | wc -l) == 1 ]]; then pass "create (random id)"
else fail "create (random id) rc=$rc id='$RID'"; sed 's/^/    /' "$TMP/create2.err"; fi

# exec: output on stdout, exit code passed through, argv not shell-interpreted
OUT=$(K exec "cli test/1" -- echo 'a  $HOME `b`'); rc=$?
[[ $rc == 0 && $OUT == 'a  $HOME `b`' ]] && pass "exec echo (no shell)" || fail "exec echo rc=$rc out='$OUT'"
K exec "cli test/1" -- sh -c 'exit 42' >/dev/null 2>&1; rc=$?
[[ $rc == 42 ]] && pass "exec exit code" || fail "exec exit code (got $rc)"
K exec "cli test/1" --timeout 1 -- sleep 30 >/dev/null 2>&1; rc=$?
[[ $rc == 124 ]] && pass "exec timeout 124" || fail "exec timeout (got $rc)"
JSON=$(K --json exec "cli test/1" -- printf hi); rc=$?
[[ $rc == 0 && $JSON == *'"output":"hi"'* && $JSON == *'"exit_code":0'* ]] && pass "exec --json" || fail "exec --json rc=$rc '$JSON'"
# exec streams as output arrives: 200 MB byte-exact (no 1 MiB cap) with the CLI's peak memory
# within 64 MiB of its peak for `true` (AddressSanitizer's own overhead is in both), stderr apart;
# a closed pipe ends the remote command (141, as a shell reports it).
measure_exec() {
    ASAN_OPTIONS="${ASAN_OPTIONS:-}:quarantine_size_mb=8" timeout 300 /usr/bin/python3 - "$KSB" exec "cli test/1" -- "$@" <<'PY'
import hashlib, resource, subprocess, sys
p = subprocess.Popen(sys.argv[1:], stdout=subprocess.PIPE)
h, n = hashlib.sha256(), 0
for chunk in iter(lambda: p.stdout.read(1 << 20), b""):
    h.update(chunk)
    n += len(chunk)
print(p.wait(), n, h.hexdigest(), resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024)
PY
}
read -r _ _ _ base_rss_mib <<<"$(measure_exec true)"
STREAMED=$(measure_exec sh -c 'yes 0123456789abcde | head -c 209715200; echo done >&2' 2>"$TMP/stream.err")
WANT=$(yes 0123456789abcde | head -c 209715200 | sha256sum | cut -d' ' -f1)
read -r s_rc s_bytes s_sha s_rss_mib <<<"$STREAMED"
if [[ $s_rc == 0 && $s_bytes == 209715200 && $s_sha == "$WANT" && -n ${base_rss_mib:-} &&
      $((${s_rss_mib:-9999} - base_rss_mib)) -lt 64 && $(cat "$TMP/stream.err") == done ]]; then
    pass "exec streams 200 MB byte-exact, peak ${s_rss_mib} MiB (${base_rss_mib} MiB for true)"
else
    fail "exec streaming (rc ${s_rc:-?}, ${s_bytes:-?} bytes, peak ${s_rss_mib:-?} MiB vs ${base_rss_mib:-?}, stderr '$(head -c 200 "$TMP/stream.err")')"
fi
K exec "cli test/1" -- sh -c 'yes | cat; touch /workspace/never' 2>/dev/null | head -c 10 >/dev/null; rc=${PIPESTATUS[0]}
LEFT=$(K exec "cli test/1" -- sh -c 'sleep 1; ps | grep -c "[y]es"')
[[ $rc == 141 && $LEFT == 0 ]] && pass "exec | head: 141 and the remote command killed" \
    || fail "exec | head (rc $rc, yes left: '$LEFT')"
K exec "no-such-sandbox" -- true >/dev/null 2>"$TMP/nf.err"; rc=$?
[[ $rc == 1 ]] && grep -q "not found" "$TMP/nf.err" && pass "exec unknown id exits 1" || fail "exec unknown id (got $rc)"

# cp both ways, byte-exact
head -c 4096 /dev/urandom >"$TMP/in.bin"
K cp "$TMP/in.bin" "cli test/1:/workspace/sub dir/in.bin"; rc=$?
[[ $rc == 0 ]] && pass "cp upload" || fail "cp upload (got $rc)"
K cp "cli test/1:/workspace/sub dir/in.bin" "$TMP/out.bin"; rc=$?
[[ $rc == 0 ]] && cmp -s "$TMP/in.bin" "$TMP/out.bin" && pass "cp download byte-exact" || fail "cp download (rc $rc)"
K cp "cli test/1:/workspace/missing" "$TMP/x" 2>"$TMP/cp.err"; rc=$?
[[ $rc == 1 ]] && grep -q file_not_found "$TMP/cp.err" && pass "cp missing file" || fail "cp missing file (rc $rc)"
# A failed download leaves the local file as it was, and nothing beside it.
echo keep >"$TMP/kept"
K cp "cli test/1:/workspace/missing" "$TMP/kept" 2>/dev/null; rc=$?
[[ $rc == 1 && $(cat "$TMP/kept") == keep && -z $(ls "$TMP" | grep ksb-partial) ]] \
    && pass "cp: a failed download keeps the local file" || fail "cp failed download (rc $rc, '$(cat "$TMP/kept")')"
# cp from a pipe, to /dev/stdout, and through a link to a file whose permissions stay.
K cp /dev/stdin "cli test/1:/workspace/piped.bin" <"$TMP/in.bin"; rc=$?
K cp "cli test/1:/workspace/piped.bin" /dev/stdout >"$TMP/piped.out"; rc2=$?
[[ $rc == 0 && $rc2 == 0 ]] && cmp -s "$TMP/in.bin" "$TMP/piped.out" && pass "cp from a pipe and to /dev/stdout" \
    || fail "cp pipe/stdout (rc $rc/$rc2)"
echo old >"$TMP/target.bin" && chmod 600 "$TMP/target.bin" && ln -s target.bin "$TMP/link.bin"
K cp "cli test/1:/workspace/piped.bin" "$TMP/link.bin"; rc=$?
if [[ $rc == 0 && -L $TMP/link.bin && $(stat -c %a "$TMP/target.bin") == 600 ]] && cmp -s "$TMP/in.bin" "$TMP/target.bin"; then
    pass "cp through a link keeps the link and the file's permissions"
else
    fail "cp through a link (rc $rc, mode $(stat -c %a "$TMP/target.bin"))"
fi
# cp streams: 200 MB each way byte-exact, the CLI's peak memory within 64 MiB of its peak for
# `exec true` (measured above).
measure_cli() {
    ASAN_OPTIONS="${ASAN_OPTIONS:-}:quarantine_size_mb=8" timeout 300 /usr/bin/python3 - "$KSB" "$@" <<'PY'
import resource, subprocess, sys
rc = subprocess.call(sys.argv[1:])
print(rc, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024)
PY
}
yes 'fedcba9876543210' | head -c 209715200 >"$TMP/big.in"
read -r up_rc up_rss_mib <<<"$(measure_cli cp "$TMP/big.in" "cli test/1:/workspace/big.bin")"
read -r down_rc down_rss_mib <<<"$(measure_cli cp "cli test/1:/workspace/big.bin" "$TMP/big.out")"
if [[ $up_rc == 0 && $down_rc == 0 && -n ${base_rss_mib:-} && $((${up_rss_mib:-9999} - base_rss_mib)) -lt 64 &&
      $((${down_rss_mib:-9999} - base_rss_mib)) -lt 64 ]] && cmp -s "$TMP/big.in" "$TMP/big.out"; then
    pass "cp streams 200 MB each way byte-exact, peak ${up_rss_mib} / ${down_rss_mib} MiB (${base_rss_mib} MiB for exec true)"
else
    fail "cp streaming (rc ${up_rc:-?}/${down_rc:-?}, peak ${up_rss_mib:-?}/${down_rss_mib:-?} MiB vs ${base_rss_mib:-?})"
fi
rm -f "$TMP/big.out"
K exec "cli test/1" -- rm -f /workspace/big.bin

# file commands: DeepAgents renderings, --json with its field names, exit 1 on a result error
printf 'alpha\nneedle one\r\n' | K write "cli test/1" "/workspace/f dir/a.txt"; rc=$?
[[ $rc == 0 ]] && pass "write from stdin" || fail "write (rc $rc)"
OUT=$(K read "cli test/1" "/workspace/f dir/a.txt"); rc=$?
[[ $rc == 0 && $OUT == $'1  alpha\n2  needle one' ]] && pass "read numbered" || fail "read rc=$rc '$OUT'"
OUT=$(K read "cli test/1" "/workspace/f dir/a.txt" --offset 1 --limit 1 --json); rc=$?
[[ $rc == 0 && $OUT == *'"content":"needle one"'* && $OUT == *'"start_line":2'* && $OUT == *'"total_lines":2'* ]] &&
  pass "read --json" || fail "read --json rc=$rc '$OUT'"
OUT=$(K ls "cli test/1" "/workspace/f dir"); rc=$?
[[ $rc == 0 && $OUT == "['/workspace/f dir/a.txt']" ]] && pass "ls" || fail "ls rc=$rc '$OUT'"
OUT=$(K edit "cli test/1" "/workspace/f dir/a.txt" "needle one" "needle 1"); rc=$?
[[ $rc == 0 && $OUT == "Successfully replaced 1 instance(s) of the string in '/workspace/f dir/a.txt'" ]] &&
  pass "edit" || fail "edit rc=$rc '$OUT'"
printf -- '-alpha' >"$TMP/old"; printf -- '--beta $x' >"$TMP/new"
OUT=$(K edit "cli test/1" "/workspace/f dir/a.txt" --old-file "$TMP/old" --new-file "$TMP/new" --json); rc=$?
[[ $rc == 1 && $OUT == *'"error":"Error: String not found in file: '"'"'-alpha'"'"'"'* ]] &&
  pass "edit --old-file, error exits 1" || fail "edit --old-file rc=$rc '$OUT'"
OUT=$(K grep "cli test/1" needle --path /workspace); rc=$?
[[ $rc == 0 && $OUT == $'/workspace/f dir/a.txt:\n  2: needle 1\r' ]] && pass "grep" || fail "grep rc=$rc '$OUT'"
OUT=$(K glob "cli test/1" '**/*.txt' --path /workspace --json); rc=$?
[[ $rc == 0 && $OUT == '{"error":null,"matches":[{"path":"/workspace/f dir/a.txt","is_dir":false}],"truncated":false}' ]] &&
  pass "glob --json" || fail "glob rc=$rc '$OUT'"
K read "cli test/1" /workspace/none.txt 2>"$TMP/read.err" >/dev/null; rc=$?
[[ $rc == 1 ]] && grep -q "File '/workspace/none.txt': file_not_found" "$TMP/read.err" && pass "read missing exits 1" ||
  fail "read missing (rc $rc)"
OUT=$(K rm "cli test/1" "/workspace/f dir"); rc=$?
[[ $rc == 0 && $OUT == "Deleted /workspace/f dir" ]] && pass "rm" || fail "rm rc=$rc '$OUT'"
K ls "cli test/1" >/dev/null 2>&1; rc=$?
[[ $rc == 2 ]] && pass "ls without path exits 2" || fail "ls without path (got $rc)"

# list pages through everything and shows both
K list >"$TMP/list.out"; rc=$?
if [[ $rc == 0 ]] && grep -q "^cli test/1 " "$TMP/list.out" && grep -q "^$RID " "$TMP/list.out"; then pass "list"
else fail "list"; sed 's/^/    /' "$TMP/list.out"; fi
K list --json --status running >"$TMP/list.json"; rc=$?
[[ $rc == 0 ]] && grep -q '"id":"cli test/1"' "$TMP/list.json" && pass "list --json" || fail "list --json"

K pool >"$TMP/pool.out"; rc=$?
[[ $rc == 0 ]] && grep -q "^active 2$" "$TMP/pool.out" && pass "pool" || { fail "pool"; sed 's/^/    /' "$TMP/pool.out"; }

# delete is idempotent
K delete "cli test/1" >/dev/null; rc=$?
[[ $rc == 0 ]] && pass "delete" || fail "delete (got $rc)"
K delete "cli test/1" >/dev/null 2>&1; rc=$?
[[ $rc == 0 ]] && pass "delete again exits 0" || fail "delete again (got $rc)"
K delete "$RID" >/dev/null; rc=$?
[[ $rc == 0 ]] && pass "delete random" || fail "delete random (got $rc)"

K cleanup --max-idle 0 >"$TMP/cleanup.out"; rc=$?
[[ $rc == 0 ]] && grep -q "^kept 0$" "$TMP/cleanup.out" && pass "cleanup" || fail "cleanup (rc $rc)"
K list >"$TMP/list2.out"
[[ $(wc -l <"$TMP/list2.out") == 1 ]] && pass "nothing left" || { fail "nothing left"; cat "$TMP/list2.out"; }

# --local: a cluster inside the process for one command
LOCAL_OUT=$(K --local create --id one-shot 2>"$TMP/local.err"); rc=$?
if [[ $rc == 0 && $LOCAL_OUT == one-shot ]]; then pass "--local create"
else fail "--local create (rc $rc '$LOCAL_OUT')"; sed 's/^/    /' "$TMP/local.err"; fi

# agent-sandbox mode: claims on the local controller, the router found beside the kubeconfig
[[ -s $KUBECONFIG.router ]] && pass "router config written beside the kubeconfig" || fail "no $KUBECONFIG.router"
A() { K --mode agent-sandbox --warm-pool busybox-runtime "$@"; }
AID=$(A create --id "agent/1" 2>"$TMP/acreate.err"); rc=$?
[[ $rc == 0 && $AID == "agent/1" ]] && pass "agent-sandbox create" || { fail "agent-sandbox create (rc $rc)"; cat "$TMP/acreate.err"; }
OUT=$(A exec "agent/1" -- sh -c 'printf "%s|" "$0" "a b"; exit 4' "it's"); rc=$?
[[ $rc == 4 && $OUT == "it's|a b|" ]] && pass "agent-sandbox exec quotes argv and returns the exit code" \
    || fail "agent-sandbox exec (rc $rc out '$OUT')"
OUT=$(A exec "agent/1" -- sh -c 'echo out; echo err >&2; exit 3' 2>"$TMP/aexec.err"); rc=$?
[[ $rc == 3 && $OUT == "out" && $(cat "$TMP/aexec.err") == "err" ]] \
    && pass "agent-sandbox exec writes stdout and stderr apart" \
    || fail "agent-sandbox exec streams (rc $rc out '$OUT' err '$(cat "$TMP/aexec.err")')"
T() { K --mode agent-sandbox --template busybox-runtime "$@"; }
TID=$(T create --id "agent/t" 2>"$TMP/tcreate.err") && OUT=$(T exec "agent/t" -- echo from-template) \
    && T delete "agent/t" >/dev/null; rc=$?
[[ $rc == 0 && $TID == "agent/t" && $OUT == "from-template" ]] && pass "agent-sandbox --template create/exec/delete" \
    || { fail "agent-sandbox --template (rc $rc id '$TID' out '$OUT')"; cat "$TMP/tcreate.err"; }
printf 'line\n' >"$TMP/in.txt"
A cp "$TMP/in.txt" "agent/1:/app/dir/in.txt" && A cp "agent/1:/app/dir/in.txt" "$TMP/back.txt" \
    && cmp -s "$TMP/in.txt" "$TMP/back.txt" && pass "agent-sandbox cp both ways" || fail "agent-sandbox cp"
# Through the router too: 200 MB each way in the memory of `exec true` (upload as a request body
# read from the file, download from the response as it arrives). The cluster side streams the
# upload as well: the router (in kubesandbox-local) relays the body and the pod's runtime spools
# it to disk, so neither grows by the file's size. Peaks are reset first (clear_refs 5).
peak_mib() { awk '/^VmHWM/ {print int($2 / 1024)}' "/proc/$1/status" 2>/dev/null; }
# Only this cluster's runtimes (not those of clusters other tests may run at the same time).
descends_from() {
    local p=$1
    while [[ -n $p && $p -gt 1 ]]; do
        [[ $p == "$2" ]] && return 0
        p=$(awk '/^PPid:/ {print $2}' "/proc/$p/status" 2>/dev/null)
    done
    return 1
}
runtimes=()
for p in $(pgrep -x sandbox-runtime); do descends_from "$p" "$PID" && runtimes+=("$p"); done  # their name in pods
declare -A runtime_before
for p in $PID "${runtimes[@]}"; do echo 5 >"/proc/$p/clear_refs" 2>/dev/null; done
for p in "${runtimes[@]}"; do runtime_before[$p]=$(peak_mib "$p"); done
local_before=$(peak_mib "$PID")
read -r up_rc up_rss_mib <<<"$(measure_cli --mode agent-sandbox cp "$TMP/big.in" "agent/1:/app/big.bin")"
local_after=$(peak_mib "$PID")
runtime_growth=0
for p in "${runtimes[@]}"; do
    m=$(peak_mib "$p")
    if [[ -n $m && -n ${runtime_before[$p]:-} && $((m - runtime_before[$p])) -gt $runtime_growth ]]; then
        runtime_growth=$((m - runtime_before[$p]))
    fi
done
if [[ $up_rc == 0 && -n $local_before && -n $local_after && $((local_after - local_before)) -lt 64 &&
      ${#runtimes[@]} -gt 0 && $runtime_growth -lt 64 ]]; then
    pass "agent-sandbox upload streams through the router and runtime (cluster +$((local_after - local_before)) MiB, runtimes +${runtime_growth} MiB at most)"
else
    fail "agent-sandbox upload on the cluster side (rc ${up_rc:-?}, cluster ${local_before:-?} -> ${local_after:-?} MiB, runtimes +${runtime_growth} MiB of ${#runtimes[@]})"
fi
read -r down_rc down_rss_mib <<<"$(measure_cli --mode agent-sandbox cp "agent/1:/app/big.bin" "$TMP/big.out")"
if [[ $up_rc == 0 && $down_rc == 0 && -n ${base_rss_mib:-} && $((${up_rss_mib:-9999} - base_rss_mib)) -lt 64 &&
      $((${down_rss_mib:-9999} - base_rss_mib)) -lt 64 ]] && cmp -s "$TMP/big.in" "$TMP/big.out"; then
    pass "agent-sandbox cp streams 200 MB each way, peak ${up_rss_mib} / ${down_rss_mib} MiB (${base_rss_mib} MiB for exec true)"
else
    fail "agent-sandbox cp streaming (rc ${up_rc:-?}/${down_rc:-?}, peak ${up_rss_mib:-?}/${down_rss_mib:-?} MiB vs ${base_rss_mib:-?})"
fi
rm -f "$TMP/big.in" "$TMP/big.out"
A exec "agent/1" -- rm -f /app/big.bin
OUT=$(A grep "agent/1" line --path /app); rc=$?
[[ $rc == 0 && $OUT == *"/app/dir/in.txt"* ]] && pass "agent-sandbox file commands" || fail "agent-sandbox grep (rc $rc '$OUT')"
OUT=$(A --json exec "agent/1" -- printf 'a\377'); rc=$?
if [[ $rc == 0 ]] && /usr/bin/python3 -c 'import json,sys,base64; d=json.loads(sys.argv[1]); assert base64.b64decode(d["output_base64"]) == b"a\xff", d' "$OUT"; then
    pass "--json output that is not UTF-8 stays valid JSON, exact bytes in base64"
else fail "--json non-UTF-8 (rc $rc '$OUT')"; fi
# --connection pod-tunnel: no router, a port-forward to the sandbox's pod through the API server
OUT=$(A --connection pod-tunnel exec "agent/1" -- sh -c 'echo tunnelled; cat /app/dir/in.txt'); rc=$?
[[ $rc == 0 && $OUT == $'tunnelled\nline' ]] && pass "agent-sandbox exec over a port-forward to the pod" \
    || fail "agent-sandbox exec over a pod tunnel (rc $rc out '$OUT')"
A --connection pod-tunnel cp "$TMP/in.txt" "agent/1:/app/t.txt" && A cp "agent/1:/app/t.txt" "$TMP/back2.txt" \
    && cmp -s "$TMP/in.txt" "$TMP/back2.txt" && pass "agent-sandbox cp over a pod tunnel" || fail "agent-sandbox cp over a pod tunnel"
# --connection tunnel / kubectl-tunnel: the router's Service (agent-sandbox-system/sandbox-router-svc:8080)
OUT=$(A --connection tunnel exec "agent/1" -- echo via-router-service); rc=$?
[[ $rc == 0 && $OUT == via-router-service ]] && pass "agent-sandbox exec through a tunnel to the router's Service" \
    || fail "agent-sandbox exec over a router tunnel (rc $rc out '$OUT')"
OUT=$(A --connection kubectl-tunnel exec "agent/1" -- echo via-kubectl); rc=$?
[[ $rc == 0 && $OUT == via-kubectl ]] && pass "agent-sandbox exec through kubectl port-forward to the router's Service" \
    || fail "agent-sandbox exec over kubectl-tunnel (rc $rc out '$OUT')"
# (signalled when the command ends; it may take a moment to exit)
for _ in $(seq 40); do pgrep -f "port-forward.*sandbox-router-svc" >/dev/null || break; sleep 0.05; done
pgrep -f "port-forward.*sandbox-router-svc" >/dev/null && fail "kubectl port-forward left running" \
    || pass "the kubectl port-forward child is gone after the command"
A --connection tunnel --router-service agent-sandbox-system/nope:8080 exec "agent/1" -- true 2>"$TMP/rs.err" >/dev/null; rc=$?
ERR=$(cat "$TMP/rs.err")
[[ $rc != 0 && $ERR == *"nope"* ]] && pass "a missing router Service is named in the error" \
    || fail "missing router service (rc $rc '$ERR')"
# --connection in-cluster: the router's in-cluster address; the local cluster's pods share the
# host's loopback, so that is the router URL kubesandbox-local wrote (no cluster DNS here)
OUT=$(A --connection in-cluster exec "agent/1" -- sh -c 'echo in-cluster; cat /app/dir/in.txt'); rc=$?
[[ $rc == 0 && $OUT == $'in-cluster\nline' ]] && pass "agent-sandbox exec through the router's in-cluster address" \
    || fail "agent-sandbox exec in-cluster (rc $rc out '$OUT')"
# --connection gateway: the router at the address the cluster's Gateway publishes
OUT=$(A --connection gateway exec "agent/1" -- sh -c 'echo via-gateway; cat /app/dir/in.txt'); rc=$?
[[ $rc == 0 && $OUT == $'via-gateway\nline' ]] && pass "agent-sandbox exec through the Gateway's address" \
    || fail "agent-sandbox exec through a gateway (rc $rc out '$OUT')"
A --connection gateway --gateway no-such-gateway exec "agent/1" -- true 2>"$TMP/gw.err" >/dev/null; rc=$?
ERR=$(cat "$TMP/gw.err")
[[ $rc != 0 && $ERR == *"no-such-gateway"* ]] && pass "a missing Gateway is named in the error" \
    || fail "missing gateway (rc $rc '$ERR')"
A --connection pigeon list >/dev/null 2>"$TMP/conn.err"; rc=$?
ERR=$(cat "$TMP/conn.err")
[[ $rc == 1 && $ERR == *"direct, in-cluster, gateway, tunnel, kubectl-tunnel, pod-tunnel or pod-direct"* ]] && pass "an unknown --connection is refused" \
    || fail "unknown --connection (rc $rc '$ERR')"
# (output captured first: grep -q ending a pipe early would fail it under pipefail)
OUT=$(A list); [[ $OUT == *$'\n'"agent/1 "* ]] && pass "agent-sandbox list" || fail "agent-sandbox list: $OUT"
OUT=$(A pool); [[ $OUT == *$'\n'"target 1"* ]] && pass "agent-sandbox pool" || fail "agent-sandbox pool: $OUT"
A delete "agent/1" >/dev/null && A exec "agent/1" -- true >/dev/null 2>&1; rc=$?
[[ $rc == 1 ]] && pass "agent-sandbox delete" || fail "agent-sandbox delete (rc $rc)"
A --warm-pool nope create --id doomed >/dev/null 2>"$TMP/doomed.err"; rc=$?
[[ $rc == 1 ]] && grep -q WarmPoolNotFound "$TMP/doomed.err" && pass "agent-sandbox unknown pool fails fast" \
    || { fail "agent-sandbox unknown pool (rc $rc)"; cat "$TMP/doomed.err"; }

if [[ $FAILURES -ne 0 ]]; then echo "$FAILURES failure(s)"; tail -20 "$TMP/server.log"; exit 1; fi
echo "all passed"
