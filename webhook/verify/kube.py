"""The verifier's cluster, the API server, through the official client's asyncio API
(`kubernetes.aio`): many logs followed at once on one event loop, not a thread each.

Raw JSON throughout (the `_without_preload_content` calls, orjson): the client's models would be
built for every pod event and every answer, and nothing here reads more than a few fields.

- pods: listed then watched, selected by the applied-policy label on the server, in every
  namespace (or one), with watch bookmarks; a 410 lists again (and tells the verifier which
  pods are there, `SYNC`, so that a pod deleted while the watch was down is forgotten); any
  other error waits with a backoff (0.5 s doubling to 30 s) and watches again;
- a container's log: one `follow` read with `limitBytes`, its chunks as they come;
- the condition: a strategic-merge patch of pods/status; Events: events.k8s.io/v1; an eviction
  (policy/v1) for a policy whose `proof.onFallback` is `fail`.
"""

from __future__ import annotations

import asyncio
import logging
import random
from typing import Any, AsyncIterator

import orjson
from kubernetes.aio import client

from webhook.core import keys
from webhook.verify.starts import Start

log = logging.getLogger("rdma_webhook.verify")

WATCH_TIMEOUT = 300
BACKOFF_MIN, BACKOFF_MAX = 0.5, 30.0
STRATEGIC = "application/strategic-merge-patch+json"


class ApiError(Exception):
    def __init__(self, status: int, text: str):
        super().__init__(f"HTTP {status}: {text[:300]}")
        self.status = status


async def _checked(resp: Any) -> Any:
    if resp.status >= 300:
        body = await resp.read()
        resp.release()
        raise ApiError(resp.status, body.decode("utf-8", "replace"))
    return resp


class KubeCluster:
    """`webhook.verify.controller.Cluster` against the API server."""

    def __init__(self, api_client: client.ApiClient, namespace: str | None = None):
        self.core = client.CoreV1Api(api_client)
        self.events = client.EventsV1Api(api_client)
        self.namespace = namespace
        self.selector = keys.APPLIED_POLICY_LABEL

    async def _list(self, **kwargs: Any) -> Any:
        if self.namespace:
            return await self.core.list_namespaced_pod_without_preload_content(self.namespace, **kwargs)
        return await self.core.list_pod_for_all_namespaces_without_preload_content(**kwargs)

    async def pod_events(self) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        backoff = BACKOFF_MIN
        version: str | None = None
        while True:
            try:
                if version is None:
                    resp = await _checked(await self._list(label_selector=self.selector, resource_version="0"))
                    data = orjson.loads(await resp.read())
                    version = data["metadata"]["resourceVersion"]
                    items = data.get("items") or []
                    yield "SYNC", {"items": items}
                    for item in items:
                        yield "ADDED", item
                resp = await _checked(
                    await self._list(
                        label_selector=self.selector,
                        watch=True,
                        resource_version=version,
                        allow_watch_bookmarks=True,
                        timeout_seconds=WATCH_TIMEOUT,
                        _request_timeout=WATCH_TIMEOUT + 30,
                    )
                )
                async for line in resp.content:
                    event = orjson.loads(line)
                    obj = event.get("object") or {}
                    if event.get("type") == "ERROR":
                        if obj.get("code") == 410:
                            version = None
                        break
                    version = (obj.get("metadata") or {}).get("resourceVersion") or version
                    if event.get("type") != "BOOKMARK":
                        yield event["type"], obj
                resp.release()
                backoff = BACKOFF_MIN
            except (asyncio.CancelledError, GeneratorExit):
                raise
            except Exception as exc:
                if isinstance(exc, ApiError) and exc.status == 410:
                    version = None
                log.warning("pod watch: %s; again in %.1f s", exc, backoff)
                await asyncio.sleep(backoff * (0.5 + random.random()))
                backoff = min(backoff * 2, BACKOFF_MAX)

    async def log(self, start: Start, limit_bytes: int) -> AsyncIterator[bytes]:
        resp = await _checked(
            await self.core.read_namespaced_pod_log_without_preload_content(
                start.pod, start.namespace, container=start.container, follow=True, limit_bytes=limit_bytes
            )
        )
        try:
            async for chunk in resp.content.iter_any():
                yield chunk
        finally:
            resp.release()

    async def set_condition(self, start: Start, patch: dict[str, Any]) -> None:
        resp = await _checked(
            await self.core.patch_namespaced_pod_status_without_preload_content(
                start.pod, start.namespace, patch, _content_type=STRATEGIC
            )
        )
        resp.release()

    async def create_event(self, event: dict[str, Any]) -> None:
        resp = await _checked(
            await self.events.create_namespaced_event_without_preload_content(event["metadata"]["namespace"], event)
        )
        resp.release()

    async def evict(self, start: Start) -> None:
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": start.pod, "namespace": start.namespace},
        }
        resp = await _checked(
            await self.core.create_namespaced_pod_eviction_without_preload_content(start.pod, start.namespace, body)
        )
        resp.release()
