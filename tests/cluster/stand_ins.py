"""What the cluster modules' tests give an informer in place of its owner, its stop event and an
HTTP response: the few attributes webhook.cluster.informer reads of them, without a thread or a
server; and an API client that answers lists without a server. One copy for tests/cluster/test_informer.py,
test_dra_watch.py, test_admission_policies.py and test_api_cache.py."""

from __future__ import annotations

import urllib.parse
from typing import Any

import orjson
from kubernetes import client


class Stop:
    """The owner's stop event: `wait` records how long the loop would wait and sets itself
    after `waits` waits (the loop then ends)."""

    def __init__(self, waits: int = 1):
        self.waits, self.waited, self._set = waits, [], False

    def is_set(self) -> bool:
        return self._set

    def set(self) -> None:
        self._set = True

    def wait(self, timeout: float) -> bool:
        self.waited.append(timeout)
        if len(self.waited) >= self.waits:
            self._set = True
        return self._set


class Owner:
    """The ClusterState an informer reports to: its settings (the defaults of
    webhook.cluster.state), a clock the test moves (`now`), its stop event, and how often the
    informer said it was ready (`recorded`)."""

    backoff_min = 0.5
    backoff_max = 30.0
    connect_timeout = 5.0
    watch_timeout = 300
    page_size = 500
    list_from_cache = True

    def __init__(self, waits: int = 1):
        self.now = 1000.0
        self.clock = lambda: self.now
        self._stopping = Stop(waits)
        self.recorded = 0

    def _record_ready(self) -> None:
        self.recorded += 1


class Resp:
    """An undecoded API answer (`_preload_content=False`): its bytes, and whether it was released."""

    def __init__(self, body: Any):
        self.data = orjson.dumps(body)
        self.released = False

    def release_conn(self) -> None:
        self.released = True


class Answering(client.ApiClient):
    """An ApiClient that answers each GET from `lists` (by path) and records what was asked."""

    def __init__(self, lists: dict[str, list[dict]]):
        super().__init__(client.Configuration())
        self.lists, self.asked = lists, []

    def call_api(self, method: str, url: str, header_params=None, *args: Any, **kw: Any):
        parts = urllib.parse.urlsplit(url)
        self.asked.append((method, parts.path, dict(urllib.parse.parse_qsl(parts.query))))
        body = {"kind": "List", "metadata": {"resourceVersion": "412"}, "items": self.lists.get(parts.path, [])}

        class Raw:  # the urllib3 response a list with _preload_content=False hands back
            data = orjson.dumps(body)

            def release_conn(self) -> None:
                pass

        class Resp:
            status = 200
            response = Raw()

        return Resp()
