#!/usr/bin/python3
"""Debian's python3-kubernetes against kubesandbox-local: paging, watch, create/patch/delete.

Usage: /usr/bin/python3 python_client_test.py PATH/TO/kubesandbox-local
"""
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

from kubernetes.stream import stream
from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

failures = 0


def check(name, ok, detail=""):
    global failures
    if ok:
        print(f"PASS: {name}")
    else:
        failures += 1
        print(f"FAIL: {name} {detail}")


def main():
    binary = sys.argv[1]
    tmp = tempfile.mkdtemp()
    os.chmod(tmp, 0o755)  # pods run as an unprivileged uid that must reach the data dir
    kubeconfig = os.path.join(tmp, "kubeconfig")
    log = open(os.path.join(tmp, "server.log"), "w")
    proc = subprocess.Popen([binary, "--kubeconfig", kubeconfig, "--data-dir", os.path.join(tmp, "data")],
                            stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 10
        while not os.path.exists(kubeconfig) and time.time() < deadline:
            time.sleep(0.1)
        if not os.path.exists(kubeconfig):
            print("FAIL: no kubeconfig written")
            return 1
        run(kubeconfig)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = None
        check("server exits 0 on SIGTERM", code == 0, f"exit={code}")
    return 1 if failures else 0


def run(kubeconfig):
    config.load_kube_config(config_file=kubeconfig)
    core = client.CoreV1Api()
    custom = client.CustomObjectsApi()
    ns = "py"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
    check("namespace created", core.read_namespace(ns).status.phase == "Active")

    for i in range(11):
        core.create_namespaced_config_map(ns, client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name=f"cm-{i:02d}", labels={"set": "paging"}), data={"i": str(i)}))
    names, token, pages = [], None, 0
    while True:
        kwargs = {"limit": 3}
        if token:
            kwargs["_continue"] = token
        page = core.list_namespaced_config_map(ns, **kwargs)
        names += [cm.metadata.name for cm in page.items]
        pages += 1
        token = page.metadata._continue
        if not token or pages > 10:
            break
    check("paged list returns all 11 in order", names == [f"cm-{i:02d}" for i in range(11)], str(names))
    check("paged list took 4 pages", pages == 4, str(pages))

    selected = core.list_namespaced_config_map(ns, label_selector="set=paging", field_selector="metadata.name=cm-03")
    check("selectors", [c.metadata.name for c in selected.items] == ["cm-03"])

    try:
        core.read_namespaced_config_map("missing", ns)
        check("404 raises", False)
    except ApiException as e:
        check("404 raises", e.status == 404 and 'configmaps \\"missing\\" not found' in e.body, e.body)

    # Watch from the list's resourceVersion; changes come from another thread.
    rv = core.list_namespaced_config_map(ns).metadata.resource_version
    seen = []

    def mutate():
        time.sleep(0.5)
        core.create_namespaced_config_map(ns, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="watched")))
        core.patch_namespaced_config_map("watched", ns, {"data": {"x": "1"}})
        core.delete_namespaced_config_map("watched", ns)

    t = threading.Thread(target=mutate)
    t.start()
    w = watch.Watch()
    for event in w.stream(core.list_namespaced_config_map, ns, resource_version=rv, timeout_seconds=5):
        if event["object"].metadata.name == "watched":
            seen.append(event["type"])
        if len(seen) >= 3:
            w.stop()
    t.join()
    check("watch sees ADDED/MODIFIED/DELETED", seen == ["ADDED", "MODIFIED", "DELETED"], str(seen))

    # Custom resources: create, merge patch, delete.
    group, version, plural = "extensions.agents.x-k8s.io", "v1beta1", "sandboxclaims"
    body = {"apiVersion": f"{group}/{version}", "kind": "SandboxClaim",
            "metadata": {"name": "claim"}, "spec": {"warmPoolRef": {"name": "pool"}}}
    created = custom.create_namespaced_custom_object(group, version, ns, plural, body)
    check("create CR", created["metadata"]["generation"] == 1)
    patched = custom.patch_namespaced_custom_object(group, version, ns, plural, "claim",
                                                    {"spec": {"warmPoolRef": {"name": "other"}}})
    check("patch CR", patched["spec"]["warmPoolRef"]["name"] == "other" and patched["metadata"]["generation"] == 2)
    custom.delete_namespaced_custom_object(group, version, ns, plural, "claim")
    try:
        custom.get_namespaced_custom_object(group, version, ns, plural, "claim")
        check("CR deleted", False)
    except ApiException as e:
        check("CR deleted", e.status == 404)

    pod = client.V1Pod(metadata=client.V1ObjectMeta(name="p"),
                       spec=client.V1PodSpec(containers=[client.V1Container(name="c", image="busybox")]))
    created = core.create_namespaced_pod(ns, pod)
    check("create pod", created.spec.restart_policy == "Always")
    core.patch_namespaced_pod("p", ns, {"metadata": {"labels": {"a": "b"}}})
    check("patch pod", core.read_namespaced_pod("p", ns).metadata.labels == {"a": "b"})
    core.delete_namespaced_pod("p", ns, grace_period_seconds=0)
    check("delete pod", not [p for p in core.list_namespaced_pod(ns).items if p.metadata.name == "p"])

    # Exec streaming through the client's WebSocket implementation.
    runner = client.V1Pod(metadata=client.V1ObjectMeta(name="runner"),
                          spec=client.V1PodSpec(containers=[client.V1Container(
                              name="c", image="busybox", command=["sleep", "3600"])]))
    core.create_namespaced_pod(ns, runner)
    ready = False
    deadline = time.time() + 30
    while time.time() < deadline and not ready:
        conds = core.read_namespaced_pod("runner", ns).status.conditions or []
        ready = any(c.type == "Ready" and c.status == "True" for c in conds)
        if not ready:
            time.sleep(0.2)
    check("exec pod ready", ready)
    resp = stream(core.connect_get_namespaced_pod_exec, "runner", ns,
                  command=["sh", "-c", "for i in 1 2 3; do echo line$i; sleep 0.2; done; echo bad >&2; exit 4"],
                  stderr=True, stdin=False, stdout=True, tty=False, _preload_content=False)
    out, err, chunks = "", "", 0
    while resp.is_open():
        resp.update(timeout=1)
        if resp.peek_stdout():
            out += resp.read_stdout()
            chunks += 1
        if resp.peek_stderr():
            err += resp.read_stderr()
    resp.close()
    check("exec streams stdout", out == "line1\nline2\nline3\n", repr(out))
    check("exec streams in pieces", chunks >= 2, f"chunks={chunks}")
    check("exec stderr", err == "bad\n", repr(err))
    check("exec exit code", resp.returncode == 4, f"returncode={resp.returncode}")
    echoed = stream(core.connect_get_namespaced_pod_exec, "runner", ns, command=["echo", "hi"],
                    stderr=True, stdin=False, stdout=True, tty=False)
    check("exec preloaded", echoed == "hi\n", repr(echoed))
    core.delete_namespaced_pod("runner", ns, grace_period_seconds=0)

    core.delete_namespace(ns)
    deadline = time.time() + 10
    gone = False
    while time.time() < deadline and not gone:
        try:
            core.read_namespace(ns)
            time.sleep(0.2)
        except ApiException as e:
            gone = e.status == 404
    check("namespace deleted", gone)


if __name__ == "__main__":
    sys.exit(main())
