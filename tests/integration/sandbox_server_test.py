"""The example agent host end to end: two sandbox_server instances on one kubesandbox-local
cluster serve the same conversation threads without sticky sessions, many at once.

Usage: sandbox_server_test.py PATH/TO/kubesandbox-local PATH/TO/sandbox_server
Standard library only; prints PASS/FAIL lines and exits non-zero on any failure.
"""
import concurrent.futures
import http.client
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse

LOCAL, SERVER = sys.argv[1], sys.argv[2]
# Threads acquired at once through both instances (KSB_SERVER_TEST_THREADS for another size).
MANY = int(os.environ.get("KSB_SERVER_TEST_THREADS", "1000"))
failures = 0


def check(ok, what):
    global failures
    print(("PASS: " if ok else "FAIL: ") + what, flush=True)
    if not ok:
        failures += 1


def request(port, method, path, body=None, timeout=120):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request(method, path, body=body)
        resp = conn.getresponse()
        data = resp.read()
        return resp.status, data
    finally:
        conn.close()


def execute(port, thread, command):
    status, data = request(port, "POST", "/threads/" + urllib.parse.quote(thread, safe="") + "/execute",
                           command.encode())
    return status, (json.loads(data) if data else None)


def start_server(kubeconfig, log, *extra):
    proc = subprocess.Popen([SERVER, "--kubeconfig", kubeconfig, "--port", "0", "--idle-ttl", "600", *extra],
                            stdout=subprocess.PIPE, stderr=log, text=True)
    line = proc.stdout.readline()
    if not line.startswith("listening on 127.0.0.1:"):
        raise RuntimeError("sandbox_server did not start: " + repr(line))
    return proc, int(line.rsplit(":", 1)[1])


def pods_of_scope(kubeconfig, scope):
    out = subprocess.run(["kubectl", "--kubeconfig", kubeconfig, "get", "pods", "-n", "default", "-l",
                          "kubesandbox.io/scope=" + scope, "-o", "name"],
                         capture_output=True, text=True, timeout=60)
    return [l for l in out.stdout.splitlines() if l.strip()]


def settled_pods(kubeconfig, want):
    """The thread pods once warm pods claimed by the instance that lost a thread's race are gone."""
    deadline = time.time() + 30
    pods = pods_of_scope(kubeconfig, "thread")
    while len(pods) != want and time.time() < deadline:
        time.sleep(0.2)
        pods = pods_of_scope(kubeconfig, "thread")
    return pods


def main():
    tmp = tempfile.mkdtemp(prefix="ksb-server-test-")
    os.chmod(tmp, 0o755)  # pods run as other uids and must reach their data directory
    kubeconfig = os.path.join(tmp, "kubeconfig")
    cluster_log = open(os.path.join(tmp, "cluster.log"), "w")
    cluster = subprocess.Popen([LOCAL, "--kubeconfig", kubeconfig, "--data-dir", os.path.join(tmp, "data")],
                               stdout=cluster_log, stderr=cluster_log)
    servers = []
    try:
        for _ in range(100):
            if os.path.exists(kubeconfig) and os.path.getsize(kubeconfig) > 0:
                break
            time.sleep(0.1)
        logs = [open(os.path.join(tmp, "server-%d.log" % i), "w") for i in range(2)]
        # No client-side rate limit: the cluster, not 50 requests/s, sets the pace at 1,000 threads.
        # Only instance a keeps a warm pool: the threads' bindings make the two agree anyway.
        a, port_a = start_server(kubeconfig, logs[0], "--threads", "2", "--qps", "0", "--warm-pool", "4")
        servers.append(a)
        b, port_b = start_server(kubeconfig, logs[1], "--delete-on-exit", "--qps", "0")
        servers.append(b)

        # a fills its warm pool when it starts.
        warm = 0
        for _ in range(600):
            status, data = request(port_a, "GET", "/stats")
            warm = (json.loads(data).get("cluster") or {}).get("warm", 0) if status == 200 else 0
            if warm >= 4:
                break
            time.sleep(0.1)
        check(warm >= 4, "the warm pool fills at start (%d warm)" % warm)

        # One thread through both instances: one sandbox, state kept between turns.
        thread = "user 7/conversation \"x\" $HOME"
        s1, r1 = execute(port_a, thread, "echo turn-1 > /workspace/notes; echo ok")
        check(s1 == 200 and r1["output"] == "ok\n" and r1["created"] is True, "first turn creates (%s %s)" % (s1, r1))
        # A thread's own pod name carries its id ("ksb-user-7-..."); a warm pod's is random.
        check(s1 == 200 and "user-7" not in r1["sandbox_id"], "the first turn is served warm (%s)" % r1.get("sandbox_id"))
        s2, r2 = execute(port_b, thread, "cat /workspace/notes")
        check(s2 == 200 and r2["output"] == "turn-1\n" and r2["created"] is False,
              "second turn on the other instance sees the first turn's file (%s %s)" % (s2, r2))
        check(r1 and r2 and r1["sandbox_id"] == r2["sandbox_id"], "one sandbox id for the thread")
        s3, r3 = execute(port_a, thread, "exit 7")
        check(s3 == 200 and r3["exit_code"] == 7, "exit codes pass through")

        # Many threads, each asked through both instances at once: one sandbox per thread.
        threads = ["conc-%d" % i for i in range(12)]
        jobs = [(port, t) for t in threads for port in (port_a, port_b)]
        with concurrent.futures.ThreadPoolExecutor(max_workers=len(jobs)) as pool:
            results = list(pool.map(lambda job: execute(job[0], job[1], "cat /etc/hostname"), jobs))
        ok = all(status == 200 for status, _ in results)
        check(ok, "%d concurrent first turns succeed" % len(jobs))
        by_thread = {}
        for (port, t), (status, r) in zip(jobs, results):
            if status == 200:
                by_thread.setdefault(t, set()).add(r["output"])
        check(all(len(v) == 1 for v in by_thread.values()) and len(by_thread) == len(threads),
              "both instances reached the same sandbox for every thread")
        created = sum(1 for _, r in results if r and r.get("created"))
        check(created == len(threads), "exactly one creation per thread (%d)" % created)
        pods = settled_pods(kubeconfig, len(threads) + 1)
        check(len(pods) == len(threads) + 1, "one pod per thread in the cluster (%d)" % len(pods))

        # Replicas at scale: MANY threads, each asked through both instances at once, 64 requests
        # in flight: exactly one new sandbox per thread, none shared between threads.
        before = len(pods)
        many = ["many-%d" % i for i in range(MANY)]
        jobs = [(port, t) for t in many for port in (port_a, port_b)]
        began = time.time()
        with concurrent.futures.ThreadPoolExecutor(max_workers=64) as pool:
            results = list(pool.map(lambda job: execute(job[0], job[1], "cat /etc/hostname"), jobs))
        took = time.time() - began
        check(all(status == 200 for status, _ in results),
              "%d first turns through two instances succeed (%.0f s)" % (len(jobs), took))
        by_thread = {}
        for (port, t), (status, r) in zip(jobs, results):
            if status == 200:
                by_thread.setdefault(t, set()).add(r["sandbox_id"])
        check(len(by_thread) == MANY and all(len(v) == 1 for v in by_thread.values()),
              "both instances reached the same sandbox for each of %d threads" % MANY)
        ids = [next(iter(v)) for v in by_thread.values() if len(v) == 1]
        check(len(set(ids)) == len(ids), "no sandbox is shared between threads")
        created = sum(1 for _, r in results if r and r.get("created"))
        check(created == MANY, "exactly one creation per thread (%d of %d)" % (created, MANY))
        pods = settled_pods(kubeconfig, before + MANY)
        check(len(pods) == before + MANY, "%d more pods in the cluster (%d)" % (MANY, len(pods) - before))

        # Lookup and removal, idempotent, from either instance.
        quoted = urllib.parse.quote(thread, safe="")
        status, data = request(port_b, "GET", "/threads/" + quoted)
        info = json.loads(data) if status == 200 else {}
        check(status == 200 and info.get("thread") == thread and info.get("status") == "running",
              "GET /threads/{thread} (%s %s)" % (status, data[:200]))
        status, _ = request(port_a, "DELETE", "/threads/" + quoted)
        check(status == 204, "DELETE /threads/{thread} -> 204 (%s)" % status)
        status, _ = request(port_b, "GET", "/threads/" + quoted)
        check(status == 404, "GET after DELETE -> 404 (%s)" % status)
        status, _ = request(port_b, "DELETE", "/threads/" + quoted)
        check(status == 204, "DELETE is idempotent (%s)" % status)

        # Bad requests get a JSON 400/404/405, never a crash.
        for method, path, body, want in [("POST", "/threads/x/execute", b"", 400),
                                         ("GET", "/threads/x/execute", None, 405),
                                         ("GET", "/nowhere", None, 404),
                                         ("POST", "/threads/x/execute?timeout=abc", b"true", 400),
                                         ("PUT", "/threads/x", None, 405)]:
            status, data = request(port_a, method, path, body)
            try:
                parsed = json.loads(data)
            except ValueError:
                parsed = None
            check(status == want and isinstance(parsed, dict) and "error" in parsed,
                  "%s %s -> %d with a JSON error (%s)" % (method, path, want, status))
        check(a.poll() is None and b.poll() is None, "both instances still running")

        status, data = request(port_a, "GET", "/stats")
        stats = json.loads(data) if status == 200 else {}
        check(status == 200 and stats.get("threads", 0) >= 1 and "cluster" in stats, "GET /stats")
        status, data = request(port_a, "GET", "/metrics")
        check(status == 200 and b"kubesandbox_acquisitions_total{kind=\"created\"}" in data, "GET /metrics")

        # SIGTERM with --delete-on-exit: the instance deletes what it bound and exits cleanly.
        b.send_signal(signal.SIGTERM)
        rc = b.wait(timeout=60 + MANY // 10)
        check(rc == 0, "SIGTERM: clean exit (%s)" % rc)
        deadline = time.time() + 30 + MANY // 10
        while time.time() < deadline and pods_of_scope(kubeconfig, "thread"):
            time.sleep(0.2)
        left = pods_of_scope(kubeconfig, "thread")
        check(not left, "--delete-on-exit leaves no sandbox behind (%d left)" % len(left))
        a.send_signal(signal.SIGTERM)
        check(a.wait(timeout=60) == 0, "the other instance stops on SIGTERM too")
    finally:
        for p in servers:
            if p.poll() is None:
                p.kill()
                p.wait()
        cluster.send_signal(signal.SIGTERM)
        try:
            cluster.wait(timeout=30)
        except subprocess.TimeoutExpired:
            cluster.kill()
        if failures:
            for name in sorted(os.listdir(tmp)):
                if name.endswith(".log"):
                    print("---- " + name)
                    print(open(os.path.join(tmp, name)).read()[-4000:])
        subprocess.run(["rm", "-rf", tmp])
    print("%d failures" % failures)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
