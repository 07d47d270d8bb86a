"""A stand-in for the two things KubeRay and the API server do for the GPU release tests.

The Kubernetes API server (ServiceProxy: HTTPS, bearer token, the dashboard's service proxy) also
serves one RayCluster object at its real path and applies JSON patches to it the way the API
server does (`test` then `replace`, all or nothing; 422 when a test fails). A reconciler makes the
number of real Ray worker nodes joined to the head follow the group's `replicas`, as KubeRay's
controller does with pods (it deletes surplus pods when in-tree autoscaling is off).
"""

from __future__ import annotations

import copy
import json
import threading
import time

from tests.ray_fixtures import RayNode, ServiceProxy, wait_for_no_gpu_workers


class FakeKubeRay(ServiceProxy):
    """`idle`: worker nodes joined to the head that no RayCluster holds (an earlier test's), taken before a new
    one is started and given the nodes still running at exit; whoever passes it stops what is left. Without
    it every node is started here and stopped at exit."""

    def __init__(self, head: RayNode, token: str, name: str, group: str, replicas: int, gpus_per_worker: int,
                 namespace: str = "ray", idle: list[RayNode] | None = None, patch_delay_s: float = 0.0):
        super().__init__(head.address, token, namespace=namespace, service=f"{name}-head-svc")
        self.head, self.name, self.gpus_per_worker, self.idle = head, name, gpus_per_worker, idle
        self.patch_delay_s = patch_delay_s  # a slow API server: each PATCH answers after this long
        self.path = f"/apis/ray.io/v1/namespaces/{namespace}/rayclusters/{name}"
        self.obj = {"apiVersion": "ray.io/v1", "kind": "RayCluster",
                    "metadata": {"name": name, "namespace": namespace},
                    "spec": {"workerGroupSpecs": [{"groupName": group, "replicas": replicas,
                                                   "minReplicas": replicas, "maxReplicas": replicas}]}}
        self.patches: list[list[dict]] = []
        self.queries: list[str] = []
        self.workers: list[RayNode] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._reconciler = threading.Thread(target=self._reconcile_loop, daemon=True)

    @property
    def replicas(self) -> int:
        with self._lock:
            return self.obj["spec"]["workerGroupSpecs"][0]["replicas"]

    def __enter__(self) -> FakeKubeRay:
        # An earlier test's workers on this head are gone, but for the idle ones this one may take.
        wait_for_no_gpu_workers(self.head, also=sum(node.gpus for node in self.idle or [] if node.running()))
        super().__enter__()
        self._reconciler.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._reconciler.join(timeout=300)
        for node in self.workers:
            # After a failed test its run may still hold the node's GPUs: only a passing test's nodes are kept.
            if self.idle is not None and exc[0] is None and node.running():
                self.idle.append(node)
            else:
                node.stop()
        super().__exit__(*exc)

    def _take_idle(self) -> RayNode | None:
        for node in list(self.idle or []):
            if node.gpus == self.gpus_per_worker and node.running():
                self.idle.remove(node)
                return node
        return None

    def _reconcile_loop(self) -> None:
        while not self._stop.is_set():
            want = self.replicas
            if len(self.workers) < want:
                self.workers.append(self._take_idle()
                                    or RayNode(gpus=self.gpus_per_worker, cpus=1, join=self.head).start(timeout=180))
            elif len(self.workers) > want:
                self.workers.pop().stop()
            else:
                time.sleep(0.3)

    def apply_patch(self, ops: list[dict]) -> tuple[int, dict]:
        with self._lock:
            doc = copy.deepcopy(self.obj)
            for op in ops:
                *parents, leaf = [p for p in op["path"].split("/") if p]
                target = doc
                for part in parents:
                    target = target[int(part)] if isinstance(target, list) else target[part]
                key = int(leaf) if isinstance(target, list) else leaf
                if op["op"] == "test":
                    if target[key] != op["value"]:
                        return 422, {"kind": "Status", "code": 422, "message": f"test failed at {op['path']}"}
                elif op["op"] == "replace":
                    target[key] = op["value"]
                else:
                    return 422, {"kind": "Status", "code": 422, "message": f"unsupported op {op['op']}"}
            self.obj = doc
            self.patches.append(ops)
            return 200, doc

    def _handler(self):
        base = super()._handler()
        fake = self

        class Handler(base):
            def _raycluster(self) -> bool:
                path, _, query = self.path.partition("?")
                if path != fake.path:
                    return False
                fake.queries.append(query)
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                if self.headers.get("Authorization", "") != f"Bearer {fake.token}":
                    self._status(401, "Unauthorized", "Unauthorized")
                elif self.command == "GET":
                    with fake._lock:
                        self._reply(200, json.dumps(fake.obj).encode())
                elif self.headers.get("Content-Type") != "application/json-patch+json":
                    self._status(415, "UnsupportedMediaType", "want application/json-patch+json")
                else:
                    time.sleep(fake.patch_delay_s)
                    code, doc = fake.apply_patch(json.loads(body))
                    self._reply(code, json.dumps(doc).encode())
                return True

            def do_GET(self) -> None:  # noqa: N802
                if not self._raycluster():
                    super().do_GET()

            def do_PATCH(self) -> None:  # noqa: N802
                if not self._raycluster():
                    self._status(404, "NotFound", f"no {self.path}")

        return Handler
