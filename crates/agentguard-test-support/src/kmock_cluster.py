"""A scripted Kubernetes API for the kubectl executor's tests: kmock's in-memory emulator on
127.0.0.1, with a small controller playing the parts a real cluster's controllers and kubelet
play. kmock has no controllers, so this script gives each Job a Pod, moves the Pod through
Pending, Running and Terminated as the scenario says, serves its log, assigns Services a
ClusterIP, gives each Deployment (a run's egress proxy) a Running pod before marking it
available, and deletes that pod with its Deployment.

A proxy pod's log is a stream, as `kubectl logs --follow` reads it: the proxy's
`listening on` line and the `proxy_log` lines at once, then (unless `proxy_cut`) the
`proxy_tail` lines once the Deployment is deleted, then the end of the log. `@RUN@` in a line
is replaced by the run the pod's `agentguard.dev/proxy` label names, so a test can script
lines for a run whose name it learns only later.

Usage: kmock_cluster.py SCENARIO_JSON. Prints `listening URL`, then `created PLURAL NAME` for
each object a client creates, and serves until stdin closes.

Scenario keys (all optional):
  namespace     the namespace the controller watches ("agentguard")
  exit_code     the container's exit code (0)
  reason        the terminated reason ("Completed" for 0, else "Error"; "OOMKilled" as given)
  logs          the container's log (""); repeated `log_repeat` times
  receipt       the isolation receipt a run pod's relay writes at the head of its log, when the
                run container's command is the relay (as agentguard's are): "pass" (default),
                "fail" (its network is not confined: `ids` fails), "garbled", or null (none)
  pending_s     seconds Pending before Running (0.2)
  run_s         seconds Running before Terminated (0.3); a negative value never terminates
  waiting       a waiting reason for a Pod that never starts ("ImagePullBackOff")
  create_error  an HTTP status every create of `refuse` is answered with (403)
  refuse        what create_error refuses: "jobs" (default) or "networkpolicies"
  version       the server's minor version (33)
  psa           the namespace's pod-security.kubernetes.io/enforce label ("restricted")
  runtime_classes  {name: handler} created at start ({})
  proxy_log     lines of a proxy pod's log written while the run goes ([])
  proxy_tail    lines written once its Deployment is deleted: the proxy's last ([])
  proxy_cut     true: the log ends after `proxy_log`, as an evicted pod's does (false)
  canary        the recorded NetworkPolicy canary verdict: "blocked" (default), "reached",
                "stale" (blocked, two days ago) or null (none recorded)

Fixes to kmock 0.8 for kubectl: the core group's discovery says `groupVersion: v1` (kmock
writes "/v1", which kubectl cannot parse) and lists only core resources; lists carry `kind`.
"""

import asyncio
import json
import random
import string
import sys
import time

import aiohttp
import kmock

SCENARIO = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
NAMESPACE = SCENARIO.get("namespace", "agentguard")
# The imageID the pod status reports for the run container, as a node would (a digest).
IMAGE_ID = "localhost/tools@sha256:" + "c" * 64
PROXY_LABEL = "agentguard.dev/proxy"
# proxy pod name -> (the run it serves, set once its Deployment is deleted)
PROXY_PODS = {}
# run pod name -> the isolation receipt line its relay writes first
RECEIPTS = {}
RELAY = "/run/agentguard/relay"
RECEIPT_MARK = "\x1eagentguard-receipt "
CLUSTER_NETWORK = "seen, not required: on a cluster the run's NetworkPolicy confines the pod"


def receipt(spec):
    """What the relay of a pod with `spec` writes first, as the real one does on a cluster."""
    command = (spec.get("containers") or [{}])[0].get("command") or []
    kind = SCENARIO.get("receipt", "pass")
    if not command or command[0] != RELAY or kind is None:
        return ""
    if kind == "garbled":
        return RECEIPT_MARK + "{not json\n"
    uid, gid = command[2].split(":")
    ids = f"uid {uid}/{uid}/{uid}/{uid} gid {gid}/{gid}/{gid}/{gid}"
    failed = []
    if kind == "fail":
        ids = "uid 0/0/0/0 gid 0/0/0/0"
        failed = ["ids"]
    checks = {
        "interfaces": f"lo,eth0 ({CLUSTER_NETWORK})",
        "routes": f"ipv4 00000000 via eth0 ({CLUSTER_NETWORK})",
        "ids": ids,
        "capabilities": "eff 0000000000000000 prm 0000000000000000 bnd 0000000000000000 amb 0000000000000000",
        "no_new_privs": "1 (/proc)",
        "root_read_only": "ro (mountinfo)",
    }
    body = {"decision": "deny" if failed else "allow", "failed": failed, "checks": checks, "micros": 250}
    return RECEIPT_MARK + json.dumps(body, separators=(",", ":")) + "\n"


class Cluster(kmock.KubernetesEmulator):
    async def _serve_list(self, request):
        out = await super()._serve_list(request)
        out["apiVersion"] = "v1"
        out["kind"] = "List"
        selector = dict(request.params).get("labelSelector")
        if selector:
            out["items"] = [i for i in out["items"] if matches(i, selector)]
        return out

    async def _serve_create(self, request):
        out = await super()._serve_create(request)
        plural = request.resource.plural
        if plural != "pods":  # the controller's own
            name = (request.data or {}).get("metadata", {}).get("name")
            print(f"created {plural} {name}", flush=True)
        return out

    async def _serve_version(self, request):
        out = await super()._serve_version(request)
        if request.resource.group == "":
            out["groupVersion"] = request.resource.version
        return out

    async def _serve_server_version(self, request):
        out = await super()._serve_server_version(request)
        minor = str(SCENARIO.get("version", 33))
        out["minor"] = minor
        out["gitVersion"] = f"v1.{minor}.0"
        return out


def matches(obj, selector):
    labels = obj.get("metadata", {}).get("labels", {}) or {}
    for term in selector.split(","):
        if "=" in term:
            key, value = term.split("=", 1)
            if labels.get(key.rstrip("=!")) != value:
                return False
        elif term and term not in labels:
            return False
    return True


def suffix():
    return "".join(random.choice(string.ascii_lowercase + string.digits) for _ in range(5))


async def controller(base):
    pods = {}  # job name -> pod name
    deployments = {}  # deployment name -> its pod's name
    async with aiohttp.ClientSession(base_url=base) as http:
        ns = f"/api/v1/namespaces/{NAMESPACE}"
        batch = f"/apis/batch/v1/namespaces/{NAMESPACE}"
        patch = {"Content-Type": "application/merge-patch+json"}
        while True:
            await asyncio.sleep(0.05)
            jobs = (await (await http.get(f"{batch}/jobs")).json()).get("items", [])
            for job in jobs:
                name = job["metadata"]["name"]
                if name in pods:
                    continue
                pod = f"{name}-{suffix()}"
                pods[name] = pod
                labels = dict(job["spec"]["template"]["metadata"].get("labels", {}))
                labels["batch.kubernetes.io/job-name"] = name
                labels["job-name"] = name
                body = {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": pod, "namespace": NAMESPACE, "labels": labels},
                    "spec": job["spec"]["template"]["spec"],
                    "status": {"phase": "Pending"},
                }
                RECEIPTS[pod] = receipt(job["spec"]["template"]["spec"])
                await http.post(f"{ns}/pods", json=body)
                asyncio.ensure_future(lifecycle(http, f"{ns}/pods/{pod}", patch))
            services = (await (await http.get(f"{ns}/services")).json()).get("items", [])
            for svc in services:
                if not svc.get("spec", {}).get("clusterIP"):
                    ip = {"spec": {"clusterIP": SCENARIO.get("cluster_ip", "10.96.0.10")}}
                    await http.patch(f"{ns}/services/{svc['metadata']['name']}", json=ip, headers=patch)
            await proxies(http, ns, patch, deployments)


async def proxies(http, ns, patch, deployments):
    """Gives each new Deployment a Running pod, then marks it available; deletes the pod of a
    Deployment that is gone, after telling its log."""
    apps = f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments"
    items = (await (await http.get(apps)).json()).get("items", [])
    names = {dep["metadata"]["name"] for dep in items}
    for name in [name for name in deployments if name not in names]:
        pod = deployments.pop(name)
        PROXY_PODS[pod][1].set()
        await http.delete(f"{ns}/pods/{pod}")
    for dep in items:
        name = dep["metadata"]["name"]
        if name not in deployments:
            pod = f"{name}-{suffix()}"
            labels = dict(dep["spec"]["template"]["metadata"].get("labels", {}))
            running = {"running": {"startedAt": "2026-12-01T00:00:00Z"}}
            body = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": pod, "namespace": NAMESPACE, "labels": labels},
                "spec": dep["spec"]["template"]["spec"],
                "status": {"phase": "Running", "containerStatuses": [{"name": "proxy", "ready": True, "state": running}]},
            }
            await http.post(f"{ns}/pods", json=body)
            PROXY_PODS[pod] = (labels.get(PROXY_LABEL, ""), asyncio.Event())
            deployments[name] = pod
        if not dep.get("status", {}).get("availableReplicas"):
            ready = {"status": {"availableReplicas": 1, "readyReplicas": 1}}
            await http.patch(f"{apps}/{name}", json=ready, headers=patch)


async def proxy_log(pod):
    """The log of a proxy pod, followed: see the module's docstring."""
    run, gone = PROXY_PODS[pod]
    lines = lambda key: "".join(line.replace("@RUN@", run) + "\n" for line in SCENARIO.get(key, []))
    yield ("listening on 0.0.0.0:3128\n" + lines("proxy_log")).encode()
    if SCENARIO.get("proxy_cut"):
        return
    await gone.wait()
    tail = lines("proxy_tail")
    if tail:
        yield tail.encode()


async def lifecycle(http, path, headers):
    waiting = SCENARIO.get("waiting")
    if waiting:
        state = {"waiting": {"reason": waiting, "message": f"scripted: {waiting}"}}
        status = {"phase": "Pending", "containerStatuses": [{"name": "run", "ready": False, "state": state}]}
        await http.patch(path, json={"status": status}, headers=headers)
        return
    await asyncio.sleep(SCENARIO.get("pending_s", 0.2))
    running = {"running": {"startedAt": "2026-12-01T00:00:00Z"}}
    status = {"phase": "Running", "containerStatuses": [{"name": "run", "ready": True, "state": running, "imageID": IMAGE_ID}]}
    await http.patch(path, json={"status": status}, headers=headers)
    run_s = SCENARIO.get("run_s", 0.3)
    if run_s < 0:
        return
    await asyncio.sleep(run_s)
    code = SCENARIO.get("exit_code", 0)
    reason = SCENARIO.get("reason", "Completed" if code == 0 else "Error")
    terminated = {"terminated": {"exitCode": code, "reason": reason}}
    phase = "Succeeded" if code == 0 else "Failed"
    status = {"phase": phase, "containerStatuses": [{"name": "run", "ready": False, "state": terminated, "imageID": IMAGE_ID}]}
    await http.patch(path, json={"status": status}, headers=headers)


async def seed(base):
    """The objects a prepared cluster has: the namespace, RuntimeClasses, the canary record."""
    async with aiohttp.ClientSession(base_url=base) as http:
        for name, handler in SCENARIO.get("runtime_classes", {}).items():
            rc = {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": name}, "handler": handler}
            await http.post("/apis/node.k8s.io/v1/runtimeclasses", json=rc)
        canary = SCENARIO.get("canary", "blocked")
        if canary is not None:
            at = int(time.time()) - (2 * 86400 if canary == "stale" else 0)
            result = "reached" if canary == "reached" else "blocked"
            record = {"apiVersion": "v1", "kind": "ConfigMap",
                      "metadata": {"name": "agentguard-networkpolicy-canary", "namespace": NAMESPACE},
                      "data": {"result": result, "checked_at": str(at), "detail": "10.96.0.1:443" if result == "reached" else ""}}
            await http.post(f"/api/v1/namespaces/{NAMESPACE}/configmaps", json=record)


async def main():
    cluster = Cluster()
    cluster.resources.load_bundled()
    # kubectl resolves `pods` to the first group listing it; keep only the core one.
    keep = [(r, cluster.resources[r]) for r in list(cluster.resources) if r.group != "metrics.k8s.io"]
    cluster.resources.clear()
    for resource, info in keep:
        cluster.resources[resource] = info
    # kmock 0.8 cannot store Namespaces (it reads `namespaces/NAME` as a namespace prefix):
    # the one namespace is a fixed answer.
    labels = {"kubernetes.io/metadata.name": NAMESPACE}
    if SCENARIO.get("psa", "restricted"):
        labels["pod-security.kubernetes.io/enforce"] = SCENARIO.get("psa", "restricted")
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE, "labels": labels}}
    cluster[f"get /api/v1/namespaces/{NAMESPACE}"] << namespace
    log = SCENARIO.get("logs", "") * SCENARIO.get("log_repeat", 1)
    cluster[kmock.subresource("log")] << (
        lambda request: proxy_log(request.name) if request.name in PROXY_PODS
        else (RECEIPTS.get(request.name, "") + log).encode())
    if "create_error" in SCENARIO:
        code = SCENARIO["create_error"]
        refuse = SCENARIO.get("refuse", "jobs")
        group = {"jobs": "batch/v1", "networkpolicies": "networking.k8s.io/v1"}[refuse]
        status = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code,
                  "reason": "Forbidden", "message": f"{refuse} is forbidden: scripted"}
        cluster[f"post /apis/{group}/namespaces/{NAMESPACE}/{refuse}"] << code << status
    async with cluster, kmock.Server(cluster) as server:
        base = str(server.url).rstrip("/")
        await seed(base)
        task = asyncio.ensure_future(controller(base))
        print(f"listening {base}", flush=True)
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, sys.stdin.read)
        task.cancel()


asyncio.run(main())
