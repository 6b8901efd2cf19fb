"""`rdma-webhook verify` as a process: the policies (reloaded on change), the verifier against the
API server (in-cluster, else kubeconfig), its metrics on their own port, a clean stop on SIGTERM.

It runs apart from the webhook (its own Deployment and ServiceAccount: SECURITY.md) because it
needs what the webhook must not have: reading pods' logs and writing their status and Events.
"""

from __future__ import annotations

import asyncio
import logging
import signal

from webhook.policy.store import PolicyStore
from webhook.verify.controller import Verifier

log = logging.getLogger("rdma_webhook.verify")


class NoCluster(Exception):
    """Neither an in-cluster identity nor a kubeconfig: nothing to verify against."""


async def _api_client(kubeconfig: str | None):
    from kubernetes.aio import client, config

    configuration = client.Configuration()
    try:
        config.load_incluster_config(client_configuration=configuration)
    except Exception:
        try:
            await config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
        except Exception as exc:
            raise NoCluster(f"no in-cluster service account and no usable kubeconfig ({exc})") from None
    return client.ApiClient(configuration)


async def serve(store: PolicyStore, namespace: str | None, kubeconfig: str | None, **tuning: float) -> None:
    """Verify until SIGTERM or SIGINT."""
    from webhook.verify.kube import KubeCluster

    api = await _api_client(kubeconfig)
    verifier = Verifier(KubeCluster(api, namespace), lambda: store.current, **tuning)  # type: ignore[arg-type]
    main = asyncio.ensure_future(verifier.run())
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, main.cancel)
    log.info("verifying the NCCL transport of the pods the webhook mutated%s", f" in {namespace}" if namespace else "")
    try:
        await main
    except asyncio.CancelledError:
        pass
    finally:
        for task in list(verifier.tasks.values()):
            task.cancel()
        await asyncio.gather(*verifier.tasks.values(), return_exceptions=True)
        await api.close()
