#!/usr/bin/env bash
# kubectl 1.32 against kubesandbox-local: discovery, create/apply/get/label/annotate/patch/watch/
# delete/wait. Usage: kubectl_conformance.sh PATH/TO/kubesandbox-local
set -euo pipefail

BIN=${1:?usage: kubectl_conformance.sh PATH/TO/kubesandbox-local}
TMP=$(mktemp -d)
chmod 755 "$TMP"  # pods run as an unprivileged uid that must reach the data dir
export HOME=$TMP  # kubectl's discovery cache lives under ~/.kube/cache
export KUBECONFIG=$TMP/kubeconfig
FAILURES=0
PID=
EXTRA_PID=

cleanup() {
    for p in $PID $EXTRA_PID; do
        if kill -0 "$p" 2>/dev/null; then kill -TERM "$p" 2>/dev/null || true; fi
    done
    rm -rf "$TMP"
}
trap cleanup EXIT

pass() { echo "PASS: $1"; }
fail() { echo "FAIL: $1"; FAILURES=$((FAILURES + 1)); }
# check NAME CMD...: CMD must succeed.
check() {
    local name=$1; shift
    if "$@" >"$TMP/out" 2>&1; then pass "$name"; else fail "$name"; sed 's/^/    /' "$TMP/out"; fi
}
# expect NAME PATTERN CMD...: CMD must succeed and print PATTERN (grep -E).
expect() {
    local name=$1 pattern=$2; shift 2
    if "$@" >"$TMP/out" 2>&1 && grep -Eq -- "$pattern" "$TMP/out"; then pass "$name"
    else fail "$name (wanted /$pattern/)"; sed 's/^/    /' "$TMP/out"; fi
}

"$BIN" --kubeconfig "$KUBECONFIG" --data-dir "$TMP/data" >"$TMP/server.log" 2>&1 &
PID=$!
for _ in $(seq 100); do [[ -s $KUBECONFIG ]] && break; sleep 0.1; done
if [[ ! -s $KUBECONFIG ]]; then echo "FAIL: kubesandbox-local did not write $KUBECONFIG"; cat "$TMP/server.log"; exit 1; fi
K() { timeout 30 kubectl --request-timeout=20s "$@"; }

expect "version" "Server Version: v1\.32\." K version
expect "api-resources core" "^pods +po +v1 +true +Pod" K api-resources
expect "api-resources sandboxclaims" "^sandboxclaims .*extensions.agents.x-k8s.io/v1beta1 +true +SandboxClaim" K api-resources
expect "api-resources networkpolicies" "^networkpolicies +netpol" K api-resources
expect "get namespaces" "^default +Active" K get namespaces

cat >"$TMP/ns.yaml" <<'YAML'
apiVersion: v1
kind: Namespace
metadata:
  name: conf
YAML
cat >"$TMP/pod.yaml" <<'YAML'
apiVersion: v1
kind: Pod
metadata:
  name: web
  namespace: conf
  labels: {app: web}
spec:
  containers:
  - name: main
    image: busybox
    command: ["sh", "-c", "echo started web; exec sleep 3600"]
YAML
cat >"$TMP/svc.yaml" <<'YAML'
apiVersion: v1
kind: Service
metadata: {name: web, namespace: conf}
spec:
  selector: {app: web}
  ports: [{port: 80, targetPort: 8080}]
YAML
cat >"$TMP/netpol.yaml" <<'YAML'
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: deny-all, namespace: conf}
spec:
  podSelector: {}
  policyTypes: [Ingress, Egress]
YAML
cat >"$TMP/claim.yaml" <<'YAML'
apiVersion: extensions.agents.x-k8s.io/v1beta1
kind: SandboxClaim
metadata: {name: claim1, namespace: conf}
spec:
  warmPoolRef: {name: python-pool}
YAML
cat >"$TMP/cm.yaml" <<'YAML'
apiVersion: v1
kind: ConfigMap
metadata: {name: applied, namespace: conf}
data: {a: "1"}
YAML

expect "create namespace" "namespace/conf created" K create -f "$TMP/ns.yaml"
expect "create pod" "pod/web created" K create -f "$TMP/pod.yaml"
expect "create service" "service/web created" K create -f "$TMP/svc.yaml"
expect "create networkpolicy" "networkpolicy.networking.k8s.io/deny-all created" K create -f "$TMP/netpol.yaml"
expect "create sandboxclaim" "sandboxclaim.extensions.agents.x-k8s.io/claim1 created" K create -f "$TMP/claim.yaml"
expect "create duplicate fails" "AlreadyExists|already exists" bash -c "! kubectl create -f '$TMP/pod.yaml' 2>&1"
# Unknown fields: kubectl 1.32 asks for fieldValidation=Strict by default, Ignore with --validate=false.
cat >"$TMP/typo.yaml" <<'YAML'
apiVersion: v1
kind: ConfigMap
metadata: {name: typo, namespace: conf}
datta: {a: "1"}
YAML
expect "create with unknown field fails" 'BadRequest.*strict decoding error: unknown field "datta"' \
    bash -c "! kubectl create -f '$TMP/typo.yaml' 2>&1"
expect "create --validate=false" "configmap/typo created" K create --validate=false -f "$TMP/typo.yaml"
expect "unknown field dropped" "^dropped$" \
    bash -c "kubectl get configmap typo -n conf -o json | grep -q datta && echo kept || echo dropped"
expect "create --validate=warn warns" 'Warning: unknown field "datta"' \
    bash -c "sed 's/name: typo/name: typo2/' '$TMP/typo.yaml' | kubectl create --validate=warn -f - 2>&1"
expect "apply create" "configmap/applied created" K apply -f "$TMP/cm.yaml"
sed -i 's/a: "1"/a: "2"/' "$TMP/cm.yaml"
expect "apply update" "configmap/applied configured" K apply -f "$TMP/cm.yaml"
expect "apply result" "^2$" K get configmap applied -n conf -o 'jsonpath={.data.a}{"\n"}'
expect "apply CR" "sandboxclaim.extensions.agents.x-k8s.io/claim1 configured" \
    bash -c "sed 's/python-pool/other-pool/' '$TMP/claim.yaml' | kubectl apply -f - 2>&1"

expect "get pod -o json" '"name": "web"' K get pod web -n conf -o json
expect "get pod -o yaml" "restartPolicy: Always" K get pod web -n conf -o yaml
expect "get -o name" "^pod/web$" K get pods -n conf -o name
expect "get pods table" "^web " K get pods -n conf
expect "get sandboxclaim" "^claim1" K get sandboxclaims -n conf
expect "get by short name" "^deny-all" K get netpol -n conf
expect "get missing" 'pods "nope" not found' bash -c "! kubectl get pod nope -n conf 2>&1"

# kubectl's typed create commands send protobuf (ConfigMap, Secret, Namespace, ServiceAccount).
expect "create configmap (protobuf)" "configmap/typed created" K create configmap typed -n conf --from-literal=a=b
expect "create secret (protobuf)" "secret/typed created" K create secret generic typed -n conf --from-literal=p=q
expect "protobuf content" "^b cQ==$" bash -c "echo \$(kubectl get configmap typed -n conf -o 'jsonpath={.data.a}') \$(kubectl get secret typed -n conf -o 'jsonpath={.data.p}')"
mkcm() { printf 'apiVersion: v1\nkind: ConfigMap\nmetadata: {name: %s, namespace: conf}\ndata: {i: "%s"}\n' "$1" "$2"; }
for i in 1 2 3 4 5 6 7; do mkcm "page-$i" "$i" | K create -f - >/dev/null; done
expect "get --chunk-size=2 returns all 7" "^7$" \
    bash -c "kubectl get configmaps -n conf -l '!nonexistent' --chunk-size=2 -o name | grep -c '^configmap/page-'"
expect "get --chunk-size=2 table" "page-7" K get configmaps -n conf --chunk-size=2

expect "label" "pod/web labeled" K label pod web -n conf tier=frontend
expect "label selector" "^web " K get pods -n conf -l tier=frontend
expect "annotate" "pod/web annotated" K annotate pod web -n conf note=hello
expect "annotation value" "^hello$" K get pod web -n conf -o 'jsonpath={.metadata.annotations.note}{"\n"}'
expect "patch merge" "configmap/applied patched" K patch configmap applied -n conf --type=merge -p '{"data":{"b":"3"}}'
expect "patch json" "configmap/applied patched" K patch configmap applied -n conf --type=json -p '[{"op":"add","path":"/data/c","value":"4"}]'
expect "patch strategic" "pod/web patched" K patch pod web -n conf --type=strategic -p '{"metadata":{"labels":{"s":"1"}}}'
expect "patch merge CR" "sandboxclaim.extensions.agents.x-k8s.io/claim1 patched" \
    K patch sandboxclaim claim1 -n conf --type=merge -p '{"spec":{"warmPoolRef":{"name":"p3"}}}'
expect "patched values" "^2 3 4$" K get configmap applied -n conf -o 'jsonpath={.data.a} {.data.b} {.data.c}{"\n"}'

# Watch in the background and make a change it must see.
(timeout 15 kubectl get configmaps -n conf -w --request-timeout=12s >"$TMP/watch.out" 2>&1 || true) &
WATCH=$!
sleep 2
mkcm watched 1 | K create -f - >/dev/null
for _ in $(seq 50); do grep -q '^watched' "$TMP/watch.out" && break; sleep 0.2; done
kill "$WATCH" 2>/dev/null || true
wait "$WATCH" 2>/dev/null || true
expect "get -w sees a new object" "^watched" cat "$TMP/watch.out"

expect "delete configmap" 'configmap "watched" deleted' K delete configmap watched -n conf
expect "delete by label" 'configmap "page-1" deleted' K delete configmaps -n conf -l '!nonexistent' --field-selector=metadata.name=page-1
expect "delete CR" 'sandboxclaim.extensions.agents.x-k8s.io "claim1" deleted' K delete sandboxclaim claim1 -n conf
(sleep 1; kubectl delete configmap applied -n conf >/dev/null 2>&1) &
expect "wait --for=delete" "condition met|deleted" K wait --for=delete configmap/applied -n conf --timeout=20s
expect "delete pod (grace 0)" 'pod "web" (force )?deleted' K delete pod web -n conf --grace-period=0 --force

if [[ ${KUBESANDBOX_CONFORMANCE_PODS:-1} == 1 ]]; then
    K create -f "$TMP/pod.yaml" >/dev/null
    expect "wait Ready" "condition met" K wait --for=condition=Ready pod/web -n conf --timeout=30s
    expect "exec" "^hello$" K exec -n conf web -- echo hello
    expect "exec stderr" "^oops$" K exec -n conf web -- sh -c 'echo oops >&2'
    expect "exec exit code" "^rc=7$" bash -c "kubectl exec -n conf web -- sh -c 'exit 7'; echo rc=\$?"
    expect "exec piped stdin" "^abc-def$" bash -c "printf 'abc-def' | kubectl exec -i -n conf web -- cat; echo"
    expect "exec into missing container" "not valid|not found" bash -c "! kubectl exec -n conf web -c nope -- true 2>&1"
    expect "logs" "^started web$" K logs -n conf web
    expect "delete pod (graceful)" 'pod "web" deleted' K delete pod web -n conf --timeout=40s
fi

expect "delete namespace" 'namespace "conf" deleted' K delete namespace conf --timeout=30s
expect "namespace gone" 'namespaces "conf" not found' bash -c "! kubectl get namespace conf 2>&1"

# ==============================================================================================
# Port-forward (section owned by the port-forward helper): real `kubectl port-forward` to a pod
# serving `python3 -m http.server` on the pod's loopback, and curl through it. Covers the
# SPDY-in-WebSocket tunnel (kubectl 1.32's default), the plain SPDY fallback, and error reporting.
# ==============================================================================================
if [[ ${KUBESANDBOX_CONFORMANCE_PODS:-1} == 1 ]]; then
    pf_free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
    # pf_forward NAME REMOTE_PORT [ENV=VALUE...]: starts kubectl port-forward; sets PF_PID PF_LPORT.
    pf_forward() {
        local name=$1 remote=$2; shift 2
        PF_LPORT=$(pf_free_port)
        env "$@" kubectl port-forward -n pf pod/pf-http "$PF_LPORT:$remote" >"$TMP/pf-$name.log" 2>&1 &
        PF_PID=$!
        for _ in $(seq 100); do grep -q 'Forwarding from' "$TMP/pf-$name.log" && break; sleep 0.1; done
    }
    pf_stop() { kill "$PF_PID" 2>/dev/null || true; wait "$PF_PID" 2>/dev/null || true; }
    # Two connections per forward: each is its own SPDY stream pair (requestid 0, then 1).
    pf_curl_twice() { curl -fsS --max-time 10 "http://127.0.0.1:$1/" && curl -fsS --max-time 10 "http://127.0.0.1:$1/"; }

    K create -f - >/dev/null <<'YAML'
apiVersion: v1
kind: Namespace
metadata: {name: pf}
---
apiVersion: v1
kind: Pod
metadata: {name: pf-http, namespace: pf}
spec:
  restartPolicy: Never
  containers:
  - name: http
    image: python:3.12-slim
    command: [python3, -m, http.server, "18080", --bind, 127.0.0.1]
YAML
    expect "port-forward pod Ready" "condition met" K wait --for=condition=Ready pod/pf-http -n pf --timeout=60s
    for _ in $(seq 50); do K exec -n pf pf-http -- python3 -c 'import socket; socket.create_connection(("127.0.0.1", 18080))' >/dev/null 2>&1 && break; sleep 0.2; done

    pf_forward tunnel 18080
    expect "port-forward (websocket tunnel) + curl" "Directory listing for /" pf_curl_twice "$PF_LPORT"
    pf_stop
    pf_forward spdy 18080 KUBECTL_PORT_FORWARD_WEBSOCKETS=false
    expect "port-forward (SPDY fallback) + curl" "Directory listing for /" pf_curl_twice "$PF_LPORT"
    pf_stop
    # Nothing listens on 18099: the kubelet's error reaches kubectl, which gives up.
    pf_forward refused 18099
    curl -sS --max-time 5 "http://127.0.0.1:$PF_LPORT/" >/dev/null 2>&1 || true
    for _ in $(seq 50); do kill -0 "$PF_PID" 2>/dev/null || break; sleep 0.1; done
    pf_stop
    expect "port-forward reports refused connections" "error forwarding port 18099 to pod .*connection refused" \
        cat "$TMP/pf-refused.log"
    K delete namespace pf --wait=false >/dev/null 2>&1 || true
fi
# ==============================================================================================

# ==============================================================================================
# Plain HTTP: kubectl sends no credentials over http://, so such a server is usable by kubectl
# only with --insecure-allow-anonymous. The same server runs with a bwrap that always fails, to
# show how pods are refused when isolation is unavailable.
# ==============================================================================================
# start_extra KUBECONFIG LOG ARGS...: starts another kubesandbox-local; sets EXTRA_PID.
start_extra() {
    local kc=$1 log=$2; shift 2
    "$BIN" --kubeconfig "$kc" "$@" >"$log" 2>&1 &
    EXTRA_PID=$!
    for _ in $(seq 100); do [[ -s $kc ]] && break; sleep 0.1; done
}
stop_extra() { kill -TERM "$EXTRA_PID" 2>/dev/null || true; wait "$EXTRA_PID" 2>/dev/null || true; EXTRA_PID=; }

expect "--insecure-allow-anonymous needs --plain-http" "needs --plain-http" \
    bash -c "! '$BIN' --kubeconfig '$TMP/never' --insecure-allow-anonymous 2>&1"
start_extra "$TMP/plain-anon.kubeconfig" "$TMP/plain-anon.log" --plain-http --insecure-allow-anonymous \
    --bwrap /bin/false --data-dir "$TMP/plain-anon-data"
PK() { K --kubeconfig "$TMP/plain-anon.kubeconfig" "$@"; }
expect "plain http + anonymous: server URL" "server: http://127\.0\.0\.1:" cat "$TMP/plain-anon.kubeconfig"
expect "plain http + anonymous: get namespaces" "^default +Active" PK get namespaces
expect "plain http + anonymous: create" "configmap/plain created" PK create configmap plain --from-literal=a=b
expect "plain http + anonymous: read back" "^b$" PK get configmap plain -o 'jsonpath={.data.a}{"\n"}'
expect "plain http + anonymous: server warns" "WARNING: unauthenticated requests are accepted" cat "$TMP/plain-anon.log"
expect "isolation unavailable: server says why" "bubblewrap isolation is unavailable .*pods will fail" \
    cat "$TMP/plain-anon.log"
PK create -f - >/dev/null <<'YAML'
apiVersion: v1
kind: Pod
metadata: {name: refused, namespace: default}
spec:
  restartPolicy: Never
  containers: [{name: main, image: busybox, command: ["true"]}]
YAML
for _ in $(seq 50); do PK get pod refused 2>/dev/null | grep -q IsolationUnavailable && break; sleep 0.2; done
expect "isolation unavailable: pod refused" "^refused +0/1 +IsolationUnavailable" PK get pod refused
expect "isolation unavailable: pod message" "bubblewrap cannot create the pod namespaces" \
    PK get pod refused -o 'jsonpath={.status.message}{"\n"}'
stop_extra
start_extra "$TMP/plain.kubeconfig" "$TMP/plain.log" --plain-http --data-dir "$TMP/plain-data"
expect "plain http without anonymous: kubectl gets 401" "must be logged in to the server" \
    bash -c "! kubectl --kubeconfig '$TMP/plain.kubeconfig' --request-timeout=20s get namespaces 2>&1"
expect "plain http without anonymous: server explains" "add --insecure-allow-anonymous" cat "$TMP/plain.log"
stop_extra

kill -TERM "$PID"
STATUS=0
wait "$PID" || STATUS=$?
PID=
if [[ $STATUS == 0 ]]; then pass "server exits 0 on SIGTERM"; else fail "server exit status $STATUS"; cat "$TMP/server.log"; fi

if [[ $FAILURES -gt 0 ]]; then echo "$FAILURES check(s) failed"; exit 1; fi
echo "all kubectl checks passed"
