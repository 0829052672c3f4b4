"""Kubernetes API stand-in for kubernetes.core: kmock 0.8's emulator plus our own reactions.

kmock serves discovery (/version, /api, /apis, /api/v1, ...), watches and the in-memory object store. Our layer
(``LabCluster._handle``) answers what kmock lacks or gets wrong for drain workflows: LIST with namespace,
fieldSelector and labelSelector and a proper ``<Kind>List`` shape; generated uid/resourceVersion/creationTimestamp;
merge, strategic-merge and JSON patches; the ``pods/<name>/eviction`` subresource with PodDisruptionBudget refusals
(429); Kubernetes-shaped 404/409 bodies; bearer-token auth; and a device-plugin view that sets each node's
``nvidia.com/*`` capacity/allocatable from a gpusim state file. Every request is appended to a JSON-lines log.

Run: ``python lab/k8s/server.py --fixture F --port 0 --run-dir DIR`` -> DIR/port, DIR/kubeconfig, DIR/requests.jsonl.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import copy
import datetime
import json
import os
import re
import secrets
import signal
import ssl
import sys
import time
import uuid

import aiohttp.web
import attrs
import kmock
import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import k8s_logic  # noqa: E402  pylint: disable=wrong-import-position
import mig_manager  # noqa: E402  pylint: disable=wrong-import-position
from k8s_gpusim import gpusim_namer  # noqa: E402  pylint: disable=wrong-import-position

# Fixture shorthand keys -> (apiVersion, kind) filled into objects that omit them.
SHORTHANDS = {
    "namespaces": ("v1", "Namespace"),
    "nodes": ("v1", "Node"),
    "pods": ("v1", "Pod"),
    "replicasets": ("apps/v1", "ReplicaSet"),
    "daemonsets": ("apps/v1", "DaemonSet"),
    "deployments": ("apps/v1", "Deployment"),
    "statefulsets": ("apps/v1", "StatefulSet"),
    "poddisruptionbudgets": ("policy/v1", "PodDisruptionBudget"),
    "configmaps": ("v1", "ConfigMap"),
}
STRATEGIES = ("none", "single", "mixed")


def _now():
    return datetime.datetime.now(tz=datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _json_response(payload, status=200):
    # Exactly 'application/json' as kube-apiserver sends: kubernetes.core only extracts Status.message then.
    return aiohttp.web.Response(body=json.dumps(payload).encode(), status=status, content_type="application/json")


class ApiError(Exception):
    def __init__(self, code, reason, message, details=None):
        super().__init__(message)
        self.body = k8s_logic.status_body(code, reason, message, details)
        self.code = code


def _not_found(resource, name):
    return ApiError(404, "NotFound", f'{resource.plural}{"." + resource.group if resource.group else ""} "{name}" not found',
                    {"name": name, "group": resource.group, "kind": resource.plural})


@attrs.define(kw_only=True)
class LabCluster(kmock.KubernetesEmulator):
    """kmock's emulator with the reactions a drain-and-reconfigure workflow needs."""

    token: str | None = attrs.field(default=None)
    request_log: str | None = attrs.field(default=None)
    eviction_delay: float = attrs.field(default=0.0)
    gpusim: dict = attrs.field(factory=dict)  # node name -> {"state": path, "strategy": "mixed"}
    devplugin_lag: float = attrs.field(default=0.0)  # seconds a state change takes to reach the node (device plugin restart)
    # GPU Operator mig-manager (fixture "migManager": configMap, namespace, withReboot, stepDelay); None: not deployed.
    mig_manager: dict | None = attrs.field(default=None)
    run_dir: str | None = attrs.field(default=None)
    _mm_queue: dict = attrs.field(factory=dict, init=False)
    _mm_running: set = attrs.field(factory=set, init=False)
    _rv: int = attrs.field(default=1000, init=False)
    _log_fh = attrs.field(default=None, init=False)
    _tasks: set = attrs.field(factory=set, init=False)
    _devplugin_cache: dict = attrs.field(factory=dict, init=False)
    _namer = attrs.field(default=None, init=False)

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        self.resources.load_bundled()
        self._namer = gpusim_namer()
        if self.request_log:
            self._log_fh = open(self.request_log, "a", encoding="utf-8", buffering=1)  # pylint: disable=consider-using-with

    # --- helpers -------------------------------------------------------------------------------------------------
    def next_rv(self):
        self._rv += 1
        return str(self._rv)

    def resource_for(self, api_version, kind):
        group, _sep, version = api_version.rpartition("/")
        for res in self.resources:
            info = self.resources[res]
            if res.group == group and res.version == version and info.kind == kind:
                return res, info
        raise ValueError(f"unknown kind {kind!r} in {api_version!r}")

    def _info(self, resource):
        try:
            return self.resources[resource]
        except KeyError:
            return None

    def live(self, resource, namespace=None):
        """(key, Object) pairs of existing objects of a resource, optionally in one namespace."""
        return [
            (key, obj) for key, obj in self.objects.items()
            if key[0] == resource and not obj.deleted and (namespace is None or key[1] == namespace)
        ]

    def get_live(self, resource, namespace, name):
        key = (resource, namespace, name)
        if key in self.objects and not self.objects[key].deleted:
            return self.objects[key]
        return None

    def _stamp(self, body, resource, namespace):
        info = self._info(resource)
        meta = body.setdefault("metadata", {})
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + secrets.token_hex(3)[:5]
        if info is not None and info.namespaced:
            meta["namespace"] = namespace or meta.get("namespace") or "default"
        else:
            meta.pop("namespace", None)
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", _now())
        meta["resourceVersion"] = self.next_rv()
        if info is not None and info.kind:
            body.setdefault("apiVersion", f"{resource.group}/{resource.version}" if resource.group else resource.version)
            body.setdefault("kind", info.kind)
        return body

    async def _publish(self, resource, event_type, raw):
        await self._buses[resource].put({"type": event_type, "object": raw})

    # --- seeding -------------------------------------------------------------------------------------------------
    def seed(self, fixture):
        """Load nodes, pods, PDBs and other objects from a parsed fixture (see README)."""
        objects = []
        for key, (api_version, kind) in SHORTHANDS.items():
            for item in fixture.get(key) or []:
                item = copy.deepcopy(item)
                item.setdefault("apiVersion", api_version)
                item.setdefault("kind", kind)
                objects.append(item)
        objects.extend(copy.deepcopy(item) for item in fixture.get("objects") or [])
        namespaces = {o["metadata"].get("namespace") for o in objects if o.get("kind") != "Namespace"} - {None}
        namespaces -= {o["metadata"]["name"] for o in objects if o.get("kind") == "Namespace"}
        objects[:0] = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}} for ns in sorted(namespaces | {"default"})]
        stored = []
        for obj in objects:
            if not (obj.get("metadata") or {}).get("name"):
                raise ValueError(f"fixture object without metadata.name: {obj!r}")
            resource = self.resource_for(obj["apiVersion"], obj["kind"])[0]
            _defaults(obj)
            self._stamp(obj, resource, obj["metadata"].get("namespace"))
            key = (resource, obj["metadata"].get("namespace"), obj["metadata"]["name"])
            if key in self.objects and not self.objects[key].deleted:
                raise ValueError(f"duplicate fixture object {obj['kind']} {key[1] or ''}/{key[2]}")
            self.objects[key] = obj
            stored.append(obj)
        # Owner references may name their owner by kind/name only: fill uid/apiVersion from the fixture.
        by_kind = {(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]): o for o in stored}
        for obj in stored:
            for ref in obj["metadata"].get("ownerReferences") or []:
                owner = by_kind.get((ref.get("kind"), obj["metadata"].get("namespace"), ref.get("name")))
                ref.setdefault("controller", True)
                if owner is not None:
                    ref.setdefault("uid", owner["metadata"]["uid"])
                    ref.setdefault("apiVersion", owner["apiVersion"])
                else:
                    ref.setdefault("uid", str(uuid.uuid4()))
                    ref.setdefault("apiVersion", "apps/v1")
        for node, spec in (fixture.get("gpusim") or {}).items():
            self.gpusim.setdefault(node, spec)

    # --- derived state -------------------------------------------------------------------------------------------
    def refresh_nodes(self):
        """Device-plugin view: nvidia.com/* capacity/allocatable from each mapped node's gpusim state."""
        node_res = kmock.resource("", "v1", "nodes")
        for node_name, spec in self.gpusim.items():
            obj = self.get_live(node_res, None, node_name)
            if obj is None:
                continue
            path = spec.get("state")
            strategy = spec.get("strategy", "mixed")
            try:
                mtime = os.stat(path).st_mtime
                if self.devplugin_lag and time.time() - mtime < self.devplugin_lag and node_name in self._devplugin_cache:
                    continue  # the device plugin has not restarted yet: keep advertising the old resources
                with open(path, encoding="utf-8") as fh:
                    state = json.load(fh)
                resources, error = k8s_logic.device_plugin_resources(state, strategy, self._namer)
            except (OSError, ValueError) as exc:
                # A half-written or missing state file must not kill the server: keep what was advertised.
                print(f"k8s lab: device plugin for {node_name}: cannot read {path}: {exc}", file=sys.stderr)
                continue
            if self._devplugin_cache.get(node_name) == (resources, error):
                continue
            self._devplugin_cache[node_name] = (resources, error)
            raw = copy.deepcopy(obj.raw)
            k8s_logic.apply_node_resources(raw, resources)
            annotations = raw["metadata"].setdefault("annotations", {})
            if error:
                annotations["lab.gpuops.io/device-plugin-error"] = error
            else:
                annotations.pop("lab.gpuops.io/device-plugin-error", None)
            raw["metadata"]["resourceVersion"] = self.next_rv()
            obj.create(raw)  # a new version in kmock's history

    def refresh_pdbs(self):
        pdb_res = kmock.resource("policy", "v1", "poddisruptionbudgets")
        pods = [obj.raw for _key, obj in self.live(kmock.resource("", "v1", "pods"))]
        for _key, obj in self.live(pdb_res):
            status = k8s_logic.pdb_status(obj.raw, pods)
            status["observedGeneration"] = obj.raw["metadata"].get("generation", 1)
            if obj.raw.get("status") != status:
                obj["status"] = status

    # --- request handling ----------------------------------------------------------------------------------------
    async def __call__(self, raw_request):
        # kmock 0.8 parses /api/v1/namespaces[/<name>] as a namespace prefix without a resource (and fails on the
        # bare list): build the Request for the Namespace resource ourselves.
        match = re.fullmatch(r"/api/v1/namespaces(?:/([^/]+))?(?:/(status|finalize))?/?", raw_request.path)
        if not match:
            return await super().__call__(raw_request)
        body = await raw_request.read()
        try:
            data = json.loads(body) if body else None
        except ValueError:
            data = None
        request = kmock.Request(
            id=len(self._requests), raw_request=raw_request, url=raw_request.url, method=raw_request.method,
            params=dict(raw_request.query), headers=dict(raw_request.headers), body=body, text=body.decode(errors="replace"),
            data=data, resource=kmock.resource("", "v1", "namespaces"), name=match.group(1), subresource=match.group(2),
        )
        self._requests.append(request)
        try:
            return await self._handle(request)
        except Exception as exc:  # pylint: disable=broad-except
            return await self._render_error(exc)

    async def _handle(self, request):
        status, extra = 500, {}
        try:
            try:
                response = await self._dispatch(request, extra)
            except ApiError as exc:
                response = _json_response(exc.body, exc.code)
            except kmock.KubernetesError as exc:
                response = await self._render_error(exc)
            status = response.status
            return response
        finally:
            self._log(request, status, extra)

    async def _render_error(self, exc):
        if isinstance(exc, kmock.KubernetesError):
            return _json_response(k8s_logic.status_body(exc.status, (exc.reason or "").replace(" ", ""), exc.message or ""), exc.status)
        return _json_response(k8s_logic.status_body(500, "InternalError", repr(exc)), 500)

    def _log(self, request, status, extra):
        if self._log_fh is None:
            return
        entry = {
            "t": round(time.time(), 3), "method": str(request.method.value if hasattr(request.method, "value") else request.method),
            "path": request.url.path, "query": dict(request.params), "status": status,
            "content_type": request.headers.get("Content-Type"),
            "resource": request.resource.plural if request.resource else None,
            "namespace": request.namespace, "name": request.name, "subresource": request.subresource,
        }
        if entry["method"] in ("POST", "PUT", "PATCH"):
            entry["body"] = request.data
        entry.update(extra)
        self._log_fh.write(json.dumps(entry, default=str) + "\n")

    async def _dispatch(self, request, extra):
        if self.token is not None and request.headers.get("Authorization") != f"Bearer {self.token}":
            raise ApiError(401, "Unauthorized", "Unauthorized")
        res = request.resource
        if res is None or res.plural is None:
            return await super()._handle(request)  # discovery and anything non-resource: kmock
        async with self._lock:
            if res.plural == "nodes" and res.group == "":
                self.refresh_nodes()
            if res.plural in ("poddisruptionbudgets", "pods"):
                self.refresh_pdbs()
        method = str(request.method.value if hasattr(request.method, "value") else request.method).upper()
        if res.plural == "pods" and request.subresource == "eviction" and method == "POST":
            return await self._evict(request, extra)
        if request.params.get("watch") in ("true", "1"):
            return await super()._handle(request)
        if self._info(res) is None and request.name is None and method == "GET":
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if request.name is None and method == "GET":
            return await self._list(request)
        if request.name is None and method == "POST":
            return await self._create(request)
        if request.name is not None and method == "GET" and request.subresource in (None, "status"):
            obj = self.get_live(res, request.namespace, request.name)
            if obj is None:
                raise _not_found(res, request.name)
            return _json_response(obj.raw)
        if request.name is not None and method in ("PATCH", "PUT") and request.subresource in (None, "status"):
            return await self._update(request, method)
        if request.name is not None and method == "DELETE" and request.subresource is None:
            return await self._delete(request)
        return await super()._handle(request)

    async def _list(self, request):
        res = request.resource
        try:
            fields = k8s_logic.parse_field_selector(request.params.get("fieldSelector", ""))
            labels = k8s_logic.parse_label_selector(request.params.get("labelSelector", ""))
        except k8s_logic.SelectorError as exc:
            raise ApiError(400, "BadRequest", str(exc)) from exc
        async with self._lock:
            items = [
                copy.deepcopy(obj.raw) for _key, obj in sorted(self.live(res, request.namespace), key=lambda kv: (kv[0][1] or "", kv[0][2]))
                if k8s_logic.match_fields(obj.raw, fields)
                and k8s_logic.match_labels((obj.raw.get("metadata") or {}).get("labels"), labels)
            ]
            rv = str(self._rv)
        info = self._info(res)
        return _json_response({
            "apiVersion": f"{res.group}/{res.version}" if res.group else res.version,
            "kind": f"{info.kind if info and info.kind else res.plural.capitalize()}List",
            "metadata": {"resourceVersion": rv},
            "items": items,
        })

    async def _create(self, request):
        res = request.resource
        body = request.data
        if not isinstance(body, dict):
            raise ApiError(400, "BadRequest", "the request body must be a JSON object")
        body = copy.deepcopy(body)
        async with self._lock:
            self._stamp(body, res, request.namespace or (body.get("metadata") or {}).get("namespace"))
            key = (res, body["metadata"].get("namespace"), body["metadata"]["name"])
            if self.get_live(*key) is not None:
                raise ApiError(409, "AlreadyExists", f'{res.plural} "{key[2]}" already exists', {"name": key[2], "kind": res.plural})
            if key in self.objects:
                self.objects[key].create(body)
            else:
                self.objects[key] = body
            await self._publish(res, "ADDED", body)
        return _json_response(body, 201)

    async def _update(self, request, method):
        res = request.resource
        async with self._lock:
            obj = self.get_live(res, request.namespace, request.name)
            if obj is None:
                raise _not_found(res, request.name)
            current = copy.deepcopy(obj.raw)
            if method == "PUT":
                new = copy.deepcopy(request.data) if isinstance(request.data, dict) else None
                if new is None:
                    raise ApiError(400, "BadRequest", "the request body must be a JSON object")
            else:
                try:
                    new = k8s_logic.apply_patch(current, request.data, request.headers.get("Content-Type"))
                except ValueError as exc:
                    status = 415 if "content type" in str(exc) else 422
                    raise ApiError(status, "UnsupportedMediaType" if status == 415 else "Invalid", str(exc)) from exc
            # Identity fields are the server's, whatever the client sent.
            meta = new.setdefault("metadata", {})
            for field in ("uid", "creationTimestamp", "name", "namespace"):
                if field in current["metadata"]:
                    meta[field] = current["metadata"][field]
            new.setdefault("apiVersion", current.get("apiVersion"))
            new.setdefault("kind", current.get("kind"))
            if new == current:
                return _json_response(current)  # no-op patches keep the resourceVersion, as the API server does
            meta["resourceVersion"] = self.next_rv()
            obj.create(new)
            await self._publish(res, "MODIFIED", new)
        if res.plural == "nodes" and res.group == "":
            old_value = ((current.get("metadata") or {}).get("labels") or {}).get(mig_manager.CONFIG_LABEL)
            new_value = (meta.get("labels") or {}).get(mig_manager.CONFIG_LABEL)
            if old_value != new_value:
                # mig-manager's informer UpdateFunc: only a changed nvidia.com/mig.config value triggers it.
                self.mig_manager_trigger(request.name, new_value)
        return _json_response(new)

    async def _delete(self, request):
        res = request.resource
        async with self._lock:
            obj = self.get_live(res, request.namespace, request.name)
            if obj is None:
                raise _not_found(res, request.name)
            raw = copy.deepcopy(obj.raw)
            obj.delete()
            await self._publish(res, "DELETED", raw)
        if res.plural == "pods" and ((raw.get("metadata") or {}).get("labels") or {}).get("app") == "nvidia-mig-manager":
            # The DaemonSet starts a new mig-manager pod, which applies the node's current label (AddFunc).
            node = (raw.get("spec") or {}).get("nodeName")
            self.mig_manager_trigger(node, self._node_label(node, mig_manager.CONFIG_LABEL))
        return _json_response(raw)

    async def _evict(self, request, extra):
        pods_res = kmock.resource("", "v1", "pods")
        async with self._lock:
            obj = self.get_live(pods_res, request.namespace, request.name)
            if obj is None:
                extra["outcome"] = "NotFound"
                raise _not_found(pods_res, request.name)
            pod = obj.raw
            extra["node"] = (pod.get("spec") or {}).get("nodeName")
            pods = [o.raw for _key, o in self.live(pods_res)]
            pdbs = [o.raw for _key, o in self.live(kmock.resource("policy", "v1", "poddisruptionbudgets"))]
            code, body = k8s_logic.eviction_verdict(pod, pdbs, pods)
            if body is not None:
                extra["outcome"] = body["reason"]
                raise ApiError(code, body["reason"], body["message"], body.get("details"))
            extra["outcome"] = "Evicted"
            if pod["metadata"].get("deletionTimestamp"):
                pass  # already terminating: eviction is a no-op success
            elif self.eviction_delay > 0:
                # Terminating first, gone later: lets clients exercise their wait-for-deletion path.
                terminating = copy.deepcopy(pod)
                terminating["metadata"]["deletionTimestamp"] = _now()
                terminating["metadata"]["deletionGracePeriodSeconds"] = int(self.eviction_delay)
                terminating["metadata"]["resourceVersion"] = self.next_rv()
                obj.create(terminating)
                await self._publish(pods_res, "MODIFIED", terminating)
                task = asyncio.get_running_loop().create_task(self._delete_later(request.namespace, request.name, self.eviction_delay))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
            else:
                raw = copy.deepcopy(pod)
                obj.delete()
                await self._publish(pods_res, "DELETED", raw)
        return _json_response({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}, 201)

    # --- GPU Operator mig-manager (lab/k8s/mig_manager.py) ----------------------------------------------------------
    def node_labels(self, node):
        """A copy of a node's labels ({} when the node does not exist)."""
        obj = self.get_live(kmock.resource("", "v1", "nodes"), None, node)
        return dict(((obj.raw.get("metadata") or {}).get("labels") or {})) if obj is not None else {}

    def _node_label(self, node, key):
        return self.node_labels(node).get(key)

    def mig_manager_managed(self, node):
        return (self.mig_manager is not None and node in self.gpusim
                and self._node_label(node, mig_manager.DEPLOY_LABEL) == "true")

    def mig_manager_trigger(self, node, value):
        """Queue a reconfigure to ``value`` for a node where mig-manager runs; one at a time per node, latest wins
        (cmd/nvidia-mig-manager/main.go: SyncableMigConfig and the loop over migReconfigure)."""
        if not value or not self.mig_manager_managed(node):
            return
        self._mm_queue[node] = value
        if node in self._mm_running:
            return
        self._mm_running.add(node)
        task = asyncio.get_running_loop().create_task(self._mig_manager_loop(node))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _mig_manager_loop(self, node):
        loop = asyncio.get_running_loop()
        try:
            while node in self._mm_queue:
                value = self._mm_queue.pop(node)
                adapter = _MigManagerNode(self, loop, node)
                path = self.gpusim[node]["state"]
                result = await asyncio.to_thread(mig_manager.reconfigure, adapter, path, value,
                                                 bool(self.mig_manager.get("withReboot")))
                adapter.log(f"reconfigure to {value}: {result}")
        finally:
            self._mm_running.discard(node)

    async def set_node_labels(self, node, labels):
        node_res = kmock.resource("", "v1", "nodes")
        async with self._lock:
            obj = self.get_live(node_res, None, node)
            if obj is None:
                return
            raw = copy.deepcopy(obj.raw)
            raw["metadata"].setdefault("labels", {}).update(labels)
            raw["metadata"]["resourceVersion"] = self.next_rv()
            obj.create(raw)
            await self._publish(node_res, "MODIFIED", raw)

    async def delete_node_pods(self, node, namespace, selector):
        pods_res = kmock.resource("", "v1", "pods")
        wanted = k8s_logic.parse_label_selector(selector)
        async with self._lock:
            for _key, obj in self.live(pods_res, namespace):
                if (obj.raw.get("spec") or {}).get("nodeName") == node and \
                        k8s_logic.match_labels((obj.raw.get("metadata") or {}).get("labels"), wanted):
                    raw = copy.deepcopy(obj.raw)
                    obj.delete()
                    await self._publish(pods_res, "DELETED", raw)

    def mig_manager_config(self):
        name = self.mig_manager.get("configMap", "default-mig-parted-config")
        namespace = self.mig_manager.get("namespace", "gpu-operator")
        obj = self.get_live(kmock.resource("", "v1", "configmaps"), namespace, name)
        return ((obj.raw.get("data") or {}).get("config.yaml")) if obj is not None else None

    def start_mig_managers(self):
        """At start every mig-manager pod applies its node's current label (the informer's AddFunc)."""
        for node in list(self.gpusim):
            self.mig_manager_trigger(node, self._node_label(node, mig_manager.CONFIG_LABEL))

    async def _delete_later(self, namespace, name, delay):
        await asyncio.sleep(delay)
        pods_res = kmock.resource("", "v1", "pods")
        async with self._lock:
            obj = self.get_live(pods_res, namespace, name)
            if obj is not None:
                raw = copy.deepcopy(obj.raw)
                obj.delete()
                await self._publish(pods_res, "DELETED", raw)


class _MigManagerNode:
    """What mig_manager.reconfigure needs from the cluster, for one node, called from its worker thread."""

    def __init__(self, cluster, loop, node):
        self.cluster, self.loop, self.node = cluster, loop, node
        self.namespace = cluster.mig_manager.get("namespace", "gpu-operator")
        self.delay = float(cluster.mig_manager.get("stepDelay", 0.5))

    def _run(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=30)

    def labels(self):
        return self.cluster.node_labels(self.node)

    def set_labels(self, labels):
        self._run(self.cluster.set_node_labels(self.node, labels))
        self.log("labels " + json.dumps(labels, sort_keys=True))

    def delete_pods(self, selector):
        self._run(self.cluster.delete_node_pods(self.node, self.namespace, selector))

    def config(self):
        return self.cluster.mig_manager_config()

    def sleep(self):
        time.sleep(self.delay)

    def log(self, message):
        if self.cluster.run_dir:
            with open(os.path.join(self.cluster.run_dir, "mig-manager.jsonl"), "a", encoding="utf-8") as fh:
                fh.write(json.dumps({"t": time.time(), "node": self.node, "event": message}) + "\n")


def _defaults(obj):
    """Fill what a real cluster would show for nodes and pods, so fixtures can stay short."""
    meta = obj.setdefault("metadata", {})
    meta.setdefault("labels", {})
    if obj["kind"] == "Node":
        meta["labels"].setdefault("kubernetes.io/hostname", meta["name"])
        obj.setdefault("spec", {})
        status = obj.setdefault("status", {})
        status.setdefault("capacity", {"cpu": "16", "memory": "65536Mi", "pods": "110"})
        status.setdefault("allocatable", dict(status["capacity"]))
        status.setdefault("conditions", [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                          "lastHeartbeatTime": _now(), "lastTransitionTime": _now()}])
        # Every field: the kubernetes client's models reject a NodeSystemInfo with any of them missing.
        seed = uuid.uuid5(uuid.NAMESPACE_DNS, meta["name"] + ".gpuops.lab")
        status.setdefault("nodeInfo", {
            "architecture": "amd64", "bootID": str(seed), "containerRuntimeVersion": "containerd://1.7.20",
            "kernelVersion": "6.1.0-25-amd64", "kubeProxyVersion": "v1.30.4", "kubeletVersion": "v1.30.4",
            "machineID": seed.hex, "operatingSystem": "linux", "osImage": "Debian GNU/Linux 12 (bookworm)",
            "systemUUID": str(seed).upper(),
        })
        status.setdefault("addresses", [{"type": "Hostname", "address": meta["name"]}])
    elif obj["kind"] in ("ReplicaSet", "DaemonSet", "Deployment", "StatefulSet"):
        # The client's strict models require spec.selector/template and the status counters.
        labels = dict(meta["labels"]) or {"app": meta["name"]}
        spec = obj.setdefault("spec", {})
        spec.setdefault("selector", {"matchLabels": labels})
        spec.setdefault("template", {"metadata": {"labels": labels},
                                     "spec": {"containers": [{"name": "main", "image": "registry.lab/app:1"}]}})
        if obj["kind"] != "DaemonSet":
            spec.setdefault("replicas", 1)
            obj.setdefault("status", {"replicas": spec["replicas"]})
        else:
            obj.setdefault("status", {"currentNumberScheduled": 0, "desiredNumberScheduled": 0, "numberMisscheduled": 0,
                                      "numberReady": 0})
    elif obj["kind"] == "Pod":
        spec = obj.setdefault("spec", {})
        spec.setdefault("containers", [{"name": "main", "image": "registry.lab/app:1"}])
        status = obj.setdefault("status", {})
        status.setdefault("phase", "Running")
        status.setdefault("conditions", [{"type": "Ready", "status": "True"}])


# --- TLS and kubeconfig ----------------------------------------------------------------------------------------------

def make_tls(run_dir):
    """Self-made CA and a server certificate for 127.0.0.1/localhost; returns (ca_pem, cert_path, key_path)."""
    import ipaddress  # pylint: disable=import-outside-toplevel

    from cryptography import x509  # pylint: disable=import-outside-toplevel
    from cryptography.hazmat.primitives import hashes, serialization  # pylint: disable=import-outside-toplevel
    from cryptography.hazmat.primitives.asymmetric import ec  # pylint: disable=import-outside-toplevel
    from cryptography.x509.oid import NameOID  # pylint: disable=import-outside-toplevel

    now = datetime.datetime.now(tz=datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "gpuops lab k8s CA")])
    ca_cert = (
        x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                                     key_encipherment=False, data_encipherment=False, key_agreement=False,
                                     encipher_only=False, decipher_only=False), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]))
        .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                       critical=False)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    ca_pem = ca_cert.public_bytes(serialization.Encoding.PEM)
    cert_path, key_path = os.path.join(run_dir, "server.crt"), os.path.join(run_dir, "server.key")
    with open(os.path.join(run_dir, "ca.crt"), "wb") as fh:
        fh.write(ca_pem)
    with open(cert_path, "wb") as fh:
        fh.write(cert.public_bytes(serialization.Encoding.PEM))
    fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    return ca_pem, cert_path, key_path


def kubeconfig(server_url, token, ca_pem=None):
    cluster = {"server": server_url}
    if ca_pem is not None:
        cluster["certificate-authority-data"] = base64.b64encode(ca_pem).decode()
    return {
        "apiVersion": "v1", "kind": "Config", "preferences": {},
        "clusters": [{"name": "gpuops-lab", "cluster": cluster}],
        "users": [{"name": "lab-admin", "user": {"token": token}}],
        "contexts": [{"name": "gpuops-lab", "context": {"cluster": "gpuops-lab", "user": "lab-admin"}}],
        "current-context": "gpuops-lab",
    }


def _write_atomic(path, text, mode=0o644):
    tmp = f"{path}.tmp{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.replace(tmp, path)


def load_fixture(path):
    with open(path, encoding="utf-8") as fh:
        data = yaml.safe_load(fh) or {}
    base = os.path.dirname(os.path.abspath(path))
    for spec in (data.get("gpusim") or {}).values():
        if spec.get("state") and not os.path.isabs(spec["state"]):
            spec["state"] = os.path.join(base, spec["state"])
    return data


def parse_gpusim_args(values):
    """``NODE=PATH[:STRATEGY]`` -> {node: {"state": path, "strategy": s}}."""
    result = {}
    for value in values or []:
        node, sep, rest = value.partition("=")
        if not sep or not node or not rest:
            raise ValueError(f"--gpusim expects NODE=PATH[:STRATEGY], got {value!r}")
        path, strategy = rest, "mixed"
        head, colon, tail = rest.rpartition(":")
        if colon and tail in STRATEGIES:
            path, strategy = head, tail
        result[node] = {"state": os.path.abspath(path), "strategy": strategy}
    return result


async def serve(args):
    os.makedirs(args.run_dir, exist_ok=True)
    token = secrets.token_urlsafe(24)
    cluster = LabCluster(
        token=token, request_log=args.request_log or os.path.join(args.run_dir, "requests.jsonl"),
        eviction_delay=args.eviction_delay, devplugin_lag=args.devplugin_lag,
    )
    fixture = load_fixture(args.fixture) if args.fixture else {}
    cluster.gpusim.update(parse_gpusim_args(args.gpusim))
    cluster.seed(fixture)
    cluster.run_dir = args.run_dir
    if fixture.get("migManager") is not None:
        cluster.mig_manager = dict(fixture["migManager"])
    if "evictionDelaySeconds" in fixture and args.eviction_delay == 0:
        cluster.eviction_delay = float(fixture["evictionDelaySeconds"])
    for spec in cluster.gpusim.values():
        if spec.get("strategy", "mixed") not in STRATEGIES:
            raise ValueError(f"gpusim strategy must be one of {STRATEGIES}, got {spec.get('strategy')!r}")

    ssl_ctx, ca_pem = None, None
    if not args.plain_http:
        ca_pem, cert_path, key_path = make_tls(args.run_dir)
        ssl_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ssl_ctx.load_cert_chain(cert_path, key_path)

    async with cluster:
        server = aiohttp.web.Server(cluster)
        runner = aiohttp.web.ServerRunner(server)
        await runner.setup()
        site = aiohttp.web.TCPSite(runner, "127.0.0.1", args.port, ssl_context=ssl_ctx)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # pylint: disable=protected-access
        url = f"{'http' if args.plain_http else 'https'}://127.0.0.1:{port}"
        _write_atomic(os.path.join(args.run_dir, "kubeconfig"), yaml.safe_dump(kubeconfig(url, token, ca_pem), sort_keys=False), 0o600)
        _write_atomic(os.path.join(args.run_dir, "port"), f"{port}\n")  # written last: readiness marker
        print(f"k8s lab listening on {url}", flush=True)
        if cluster.mig_manager is not None:
            cluster.start_mig_managers()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        await runner.cleanup()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fixture", help="YAML/JSON file with nodes, pods, poddisruptionbudgets, objects, gpusim")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port (written to RUN_DIR/port)")
    parser.add_argument("--run-dir", required=True, help="where port, kubeconfig, CA and requests.jsonl go")
    parser.add_argument("--request-log", help="request log path (default RUN_DIR/requests.jsonl)")
    parser.add_argument("--gpusim", action="append", metavar="NODE=PATH[:STRATEGY]",
                        help="device-plugin view: node NODE advertises the GPUs of gpusim state PATH (strategy none|single|mixed)")
    parser.add_argument("--eviction-delay", type=float, default=0.0, help="seconds an evicted pod stays terminating")
    parser.add_argument("--devplugin-lag", type=float, default=0.0, help="seconds before a gpusim state change is advertised")
    parser.add_argument("--plain-http", action="store_true", help="serve HTTP instead of HTTPS with a generated CA")
    args = parser.parse_args(argv)
    try:
        asyncio.run(serve(args))
    except ValueError as exc:
        print(f"k8s lab: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
