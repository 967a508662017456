"""What a pod must not reach on the local cluster, tried with kubectl as an operator would.

- A data directory the pods' host uid cannot reach is refused at start, with the fix in the message.
- The kubeconfig holding the token is mode 0600.
- A volume named like a host path is refused (422) and creates nothing on the host.
- The cluster runs on a terminal: an exec'd command cannot open that terminal (/dev/tty).
- SIGKILL of the cluster process leaves no pod or exec process behind, also of a pod still starting.

Usage: local_isolation_test.py PATH/TO/kubesandbox-local
Standard library only; prints PASS/FAIL lines and exits non-zero on any failure.
"""
import json
import os
import pty
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time

LOCAL = sys.argv[1]
failures = 0


def check(ok, what):
    global failures
    print(("PASS: " if ok else "FAIL: ") + what, flush=True)
    if not ok:
        failures += 1


def kubectl(kubeconfig, *args, stdin=None, timeout=60):
    return subprocess.run(["kubectl", "--kubeconfig", kubeconfig, *args], input=stdin, capture_output=True,
                          text=True, timeout=timeout)


def processes_with(marker):
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                if marker.encode() in f.read():
                    found.append(int(pid))
        except OSError:
            pass
    return found


def describe(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            args = f.read().replace(b"\0", b" ")[:200].decode(errors="replace")
        with open("/proc/%d/status" % pid) as f:
            ppid = [l.split()[1] for l in f if l.startswith("PPid:")]
        return "%d (ppid %s): %s" % (pid, ppid[0] if ppid else "?", args)
    except OSError:
        return "%d (gone)" % pid


def private_data_dir_is_refused(tmp):
    private = tempfile.mkdtemp(dir=tmp)  # 0700, as mktemp -d makes it
    data = os.path.join(private, "data")
    r = subprocess.run([LOCAL, "--kubeconfig", os.path.join(private, "k"), "--data-dir", data],
                       capture_output=True, text=True, timeout=60)
    check(r.returncode == 1, "a data dir below a 0700 folder is refused at start (rc %d)" % r.returncode)
    check("chmod o+x " + private in r.stderr, "the refusal says what to do: " + r.stderr.strip()[:200])
    check(not os.path.exists(data), "the refused data dir was not created")


def pod(name, command, volumes=None, mounts=None):
    container = {"name": "main", "image": "busybox", "command": command,
                 "securityContext": {"runAsUser": 1000, "runAsGroup": 1000}}
    if mounts:
        container["volumeMounts"] = mounts
    spec = {"containers": [container], "terminationGracePeriodSeconds": 1}
    if volumes:
        spec["volumes"] = volumes
    return json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
                       "spec": spec})


def main():
    tmp = tempfile.mkdtemp(prefix="ksb-isolation-test-")
    os.chmod(tmp, 0o755)
    private_data_dir_is_refused(tmp)

    kubeconfig = os.path.join(tmp, "kubeconfig")
    # The cluster as a developer runs it: on a terminal that is its controlling terminal.
    pid, master = pty.fork()
    if pid == 0:
        os.execv(LOCAL, [LOCAL, "--kubeconfig", kubeconfig, "--data-dir", os.path.join(tmp, "data")])
    terminal = bytearray()

    def drain():
        while True:
            try:
                chunk = os.read(master, 4096)
            except OSError:
                return
            if not chunk:
                return
            terminal.extend(chunk)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    killed = False
    try:
        for _ in range(200):
            if os.path.exists(kubeconfig) and os.path.getsize(kubeconfig) > 0:
                break
            time.sleep(0.05)
        mode = stat.S_IMODE(os.stat(kubeconfig).st_mode)
        check(mode == 0o600, "the kubeconfig is mode 0600 (%04o)" % mode)

        escape = os.path.join(tmp, "escaped-volume")
        r = kubectl(kubeconfig, "apply", "-f", "-", stdin=pod(
            "escape", ["sleep", "3600"], volumes=[{"name": escape, "emptyDir": {}}],
            mounts=[{"name": escape, "mountPath": "/m"}]))
        check(r.returncode != 0 and "spec.volumes[0].name: Invalid value" in r.stderr,
              "a volume named like a host path is refused: " + r.stderr.strip()[:160])
        time.sleep(0.5)
        check(not os.path.exists(escape), "no host folder was made from a volume name")

        r = kubectl(kubeconfig, "apply", "-f", "-", stdin=pod("victim", ["sleep", "31337"]))
        check(r.returncode == 0, "pod created: " + r.stderr.strip())
        r = kubectl(kubeconfig, "wait", "--for=condition=Ready", "pod/victim", "--timeout=60s", timeout=90)
        check(r.returncode == 0, "pod ready: " + r.stderr.strip())

        r = kubectl(kubeconfig, "exec", "victim", "--", "sh", "-c", "echo TTY-INJECTED > /dev/tty && echo opened")
        check(r.returncode != 0 and "opened" not in r.stdout,
              "an exec'd command cannot open the cluster's terminal (rc %d, %r)" % (r.returncode, r.stderr.strip()))
        r = kubectl(kubeconfig, "exec", "victim", "--", "sh", "-c", "echo done")
        check(r.returncode == 0 and "done" in r.stdout, "exec still works: " + r.stderr.strip())
        time.sleep(0.3)
        check(b"TTY-INJECTED" not in terminal, "nothing a pod wrote reached the terminal")

        # A command left running in the pod by an exec, then the cluster is SIGKILLed.
        r = kubectl(kubeconfig, "exec", "victim", "--", "sh", "-c", "sleep 31338 </dev/null >/dev/null 2>&1 &")
        check(r.returncode == 0, "background exec started: " + r.stderr.strip())
        check(len(processes_with("31337")) >= 1 and len(processes_with("31338")) >= 1,
              "the pod and its exec'd command run")
        # And a pod caught starting: its bwrap's argv names it (--hostname mid-start-31339).
        kubectl(kubeconfig, "apply", "-f", "-", stdin=pod("mid-start-31339", ["sleep", "31339"]))
        for _ in range(100):
            if processes_with("mid-start-31339"):
                break
            time.sleep(0.01)
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        killed = True
        left = None
        for _ in range(100):
            left = processes_with("31337") + processes_with("31338") + processes_with("31339")
            if not left:
                break
            time.sleep(0.05)
        check(not left, "no pod process outlives a SIGKILLed cluster (left: %s)" % [describe(p) for p in left])
    finally:
        if not killed:
            os.kill(pid, signal.SIGTERM)
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass
        for p in processes_with("31337") + processes_with("31338") + processes_with("31339"):
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass
        os.close(master)
    subprocess.run(["rm", "-rf", tmp])
    print("%d failed" % failures)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
