"""A workload's pull secrets as registry credentials (``imageResolver.pullSecrets``, off by
default).

For a :class:`~cudasched.knowledge.imageconfig.PullScope` (a namespace, the Secrets a workload
names, its ServiceAccount) the reader gets each named Secret by name through the kube edge
(:mod:`cudasched.kube.secrets`; the ServiceAccount first when the workload names none) and
turns it into a :class:`~cudasched.registry.auth.Keychain` the way the kubelet does
(kubernetes/kubernetes pkg/credentialprovider/secrets/secrets.go ``MakeDockerKeyring``): a
``kubernetes.io/dockerconfigjson`` Secret's ``.dockerconfigjson`` or a
``kubernetes.io/dockercfg`` Secret's ``.dockercfg``; Secrets of other types are not pull
secrets and are ignored. Where two Secrets list the same registry, the first named wins.

Only the scope's namespace is ever read: a Secret name is looked up in the namespace of the
workload that names it, never another. As the kubelet does (kubernetes/kubernetes
pkg/kubelet/kubelet_pods.go ``getPullSecretsForPod``), a named Secret that cannot be read (a
name no Secret could have, a refused or failed get) or does not exist is skipped and the
others are used; only when none of them could be read is the scope's read ``failed``.
Keychains are kept in memory only, per scope, for
``ttl_seconds`` (a rotated or revoked secret is seen within that time), at most
``max_scopes`` of them. Nothing here logs or raises a credential: errors name the Secret and
the HTTP status.

The kube client is async (lightkube); the resolver's workers are threads. The reader has its
own client on its own loop thread (:class:`~cudasched.kube.threaded.ThreadedClient`), and a
worker waits for a read at most ``timeout_seconds``.
"""

from __future__ import annotations

import base64
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any, Protocol

import orjson

from cudasched.knowledge.imageconfig import PullScope
from cudasched.kube.secrets import read_secret, read_service_account
from cudasched.kube.threaded import ThreadedClient
from cudasched.registry.auth import Keychain, keychain_from_docker_config
from cudasched.vocab.errors import InputError

__all__ = ["DOCKERCFG", "DOCKERCONFIGJSON", "PullSecretReader", "keychain_of_secret"]

log = logging.getLogger(__name__)

#: The Secret types the kubelet reads pull credentials from, and the data key of each.
DOCKERCONFIGJSON = ("kubernetes.io/dockerconfigjson", ".dockerconfigjson")
DOCKERCFG = ("kubernetes.io/dockercfg", ".dockercfg")
#: At most this many Secrets are read for one scope (a pod may name any number).
MAX_SECRETS = 16


def keychain_of_secret(secret: Mapping[str, Any], where: str) -> Keychain | None:
    """The credentials of a pull secret, or ``None`` when it is not one (another type, or
    its key missing or empty). Raises :class:`InputError` naming ``where`` (never the
    content) when its data is not base64 of a Docker config."""
    kind = secret.get("type")
    data = secret.get("data")
    data = data if isinstance(data, Mapping) else {}
    for secret_type, key in (DOCKERCONFIGJSON, DOCKERCFG):
        raw = data.get(key)
        if kind != secret_type or not isinstance(raw, str) or not raw:
            continue
        try:
            doc = orjson.loads(base64.b64decode(raw, validate=True))
        except ValueError:  # bad base64 (binascii.Error), not ASCII, not JSON
            raise InputError(f"{where}: {key} is not base64 of a JSON document") from None
        if secret_type == DOCKERCONFIGJSON[0] and not (
            isinstance(doc, Mapping) and isinstance(doc.get("auths"), Mapping)
        ):
            raise InputError(f'{where}: {key} has no "auths" mapping')
        return keychain_from_docker_config(doc, where)
    return None


class PullSecretObserver(Protocol):
    """What the webhook counts: each scope's keychain, by result (``read``, ``cached``,
    ``failed``)."""

    def pull_secrets(self, result: str) -> None: ...


class PullSecretReader:
    """Keychains of pull scopes (see the module's docstring). Thread-safe."""

    def __init__(
        self,
        client_factory: Callable[[], Any],
        *,
        ttl_seconds: float = 60.0,
        max_scopes: int = 256,
        timeout_seconds: float = 5.0,
        observer: PullSecretObserver | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if ttl_seconds <= 0 or max_scopes < 1 or timeout_seconds <= 0:
            raise InputError(
                "invalid pull secret reader: ttl_seconds and timeout_seconds > 0, "
                f"max_scopes >= 1 (got {ttl_seconds}, {timeout_seconds}, {max_scopes})"
            )
        self.ttl_seconds = ttl_seconds
        self.max_scopes = max_scopes
        self.timeout_seconds = timeout_seconds
        self._observer = observer
        self._clock = clock
        self._kept: OrderedDict[PullScope, tuple[Keychain, float]] = OrderedDict()
        self._lock = threading.Lock()
        self._client = ThreadedClient(
            client_factory, timeout_seconds=timeout_seconds, name="pull-secrets"
        )

    def keychain_for(self, scope: PullScope) -> Keychain:
        """The scope's credentials (empty when it has none or they could not be read);
        blocks the calling thread for at most ``timeout_seconds``."""
        now = self._clock()
        with self._lock:
            found = self._kept.get(scope)
            if found is not None and found[1] > now:
                self._kept.move_to_end(scope)
                self._count("cached")
                return found[0]
        try:
            chain = self._client.run(partial(self._read, scope=scope))
            result = "read"
        except InputError as exc:
            log.warning("pull secrets of namespace %s not read: %s", scope.namespace, exc)
            chain, result = Keychain(), "failed"
        with self._lock:
            self._kept[scope] = (chain, self._clock() + self.ttl_seconds)
            self._kept.move_to_end(scope)
            while len(self._kept) > self.max_scopes:
                self._kept.popitem(last=False)
        self._count(result)
        return chain

    def close(self) -> None:
        """Stop the reader's loop and close its client."""
        self._client.close()

    # ------------------------------------------------------------------ reading

    async def _read(self, client: Any, *, scope: PullScope) -> Keychain:
        namespace = scope.namespace
        names = scope.secrets
        if not names:
            account = await read_service_account(client, namespace, scope.service_account)
            listed = (account or {}).get("imagePullSecrets")
            names = tuple(
                str(e["name"])
                for e in (listed if isinstance(listed, list) else ())
                if isinstance(e, Mapping) and isinstance(e.get("name"), str) and e["name"]
            )
        chain = Keychain()
        failed: list[InputError] = []
        for name in names[:MAX_SECRETS]:
            where = f"pull secret {namespace}/{name}"
            try:
                secret = await read_secret(client, namespace, name)
            except InputError as exc:  # as the kubelet: skip it, use the others
                log.warning("%s skipped: %s", where, exc)
                failed.append(exc)
                continue
            if secret is None:
                log.info("%s does not exist", where)
                continue
            try:
                found = keychain_of_secret(secret, where)
            except InputError as exc:
                log.warning("%s", exc)
                continue
            if found is not None:
                chain = chain.merged(found)
        if failed and len(failed) == len(names[:MAX_SECRETS]):
            raise failed[0]  # none could be read (no RBAC in this namespace?): "failed"
        return chain

    def _count(self, result: str) -> None:
        if self._observer is not None:
            self._observer.pull_secrets(result)
