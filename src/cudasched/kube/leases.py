"""Leader election on a ``coordination.k8s.io/v1`` Lease, client-go's ``leaderelection`` in
asyncio: one writer among a controller's replicas.

A replica holds the lease while it renews ``renewTime`` within ``leaseDurationSeconds``; a
replica that finds the lease expired (or never held) takes it by writing itself as
``holderIdentity`` with the resourceVersion it read, so of two that try at once the API server
lets one win (``409 Conflict`` for the other). :meth:`LeaseLock.held` is what a writer asks
before each write: it is true only until ``renew_deadline`` after the last successful renewal,
which is shorter than the lease itself, so a replica that cannot renew stops writing before
another can take over, and one whose lease was taken (its renewal finds another holder) stops
at once. Times are the API server's ``MicroTime`` in UTC; the clock of each replica is trusted
only for "how long since I renewed".
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from typing import Any

from cudasched.kube.reflector import status_code
from cudasched.kube.resources import resource_of
from cudasched.vocab.kinds import LEASE

__all__ = ["LeaseLock"]

log = logging.getLogger(__name__)


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _micro(moment: dt.datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse(text: object) -> dt.datetime | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


class LeaseLock:
    """One replica's side of the election on Lease ``namespace/name``."""

    def __init__(
        self,
        client: Any,
        namespace: str,
        name: str,
        identity: str,
        *,
        lease_seconds: int = 15,
        renew_deadline: float = 10.0,
    ) -> None:
        if not 0 < renew_deadline < lease_seconds:
            raise ValueError("renew_deadline must be positive and shorter than the lease")
        self.client = client
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_seconds = lease_seconds
        self.renew_deadline = renew_deadline
        self._resource = resource_of(LEASE)
        self._renewed: float | None = None  # time.monotonic() of the last successful renewal
        self.transitions = 0

    def held(self) -> bool:
        """Whether this replica may write now."""
        renewed = self._renewed
        return renewed is not None and time.monotonic() - renewed < self.renew_deadline

    def _spec(self, current: dict[str, Any] | None) -> dict[str, Any]:
        now = _micro(_now())
        spec = dict((current or {}).get("spec") or {})
        taking = spec.get("holderIdentity") != self.identity
        if taking:
            spec["acquireTime"] = now
            spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + (
                1 if current is not None else 0
            )
        spec.update(
            holderIdentity=self.identity, leaseDurationSeconds=self.lease_seconds, renewTime=now
        )
        return spec

    def _expired(self, spec: dict[str, Any]) -> bool:
        renewed = _parse(spec.get("renewTime")) or _parse(spec.get("acquireTime"))
        duration = spec.get("leaseDurationSeconds") or self.lease_seconds
        if renewed is None or not spec.get("holderIdentity"):
            return True
        return _now() > renewed + dt.timedelta(seconds=float(duration))

    async def try_acquire_or_renew(self) -> bool:
        """Renew the lease, or take it when it is free or expired; whether this replica holds
        it afterwards. Errors count as not renewed (``held`` runs out on its own)."""
        started = time.monotonic()
        try:
            current = await self._get()
            if current is None:
                body = {
                    "apiVersion": LEASE.api_version,
                    "kind": LEASE.kind,
                    "metadata": {"name": self.name, "namespace": self.namespace},
                    "spec": self._spec(None),
                }
                await self.client.create(self._resource.from_dict(body))
            else:
                spec = current.get("spec") or {}
                if spec.get("holderIdentity") != self.identity and not self._expired(spec):
                    self._renewed = None  # someone else holds it: stop writing at once
                    return False
                current["spec"] = self._spec(current)
                await self.client.replace(self._resource.from_dict(current))
        except Exception as exc:  # a conflict, a timeout, a refused connection
            if status_code(exc) != 409:
                log.warning("lease %s/%s not renewed: %s", self.namespace, self.name, exc)
            return self.held()
        if self._renewed is None:
            self.transitions += 1
            log.info("lease %s/%s acquired by %s", self.namespace, self.name, self.identity)
        self._renewed = started
        return True

    async def _get(self) -> dict[str, Any] | None:
        try:
            found = await self.client.get(self._resource, self.name, namespace=self.namespace)
        except Exception as exc:
            if status_code(exc) == 404:
                return None
            raise
        raw = found.to_dict() if hasattr(found, "to_dict") else dict(found)
        return dict(raw)

    async def release(self) -> None:
        """Give the lease up (on shutdown) so another replica need not wait for it to
        expire."""
        if not self.held():
            return
        self._renewed = None
        try:
            current = await self._get()
            if (
                current is None
                or (current.get("spec") or {}).get("holderIdentity") != self.identity
            ):
                return
            current["spec"] = {**current["spec"], "holderIdentity": "", "leaseDurationSeconds": 1}
            await self.client.replace(self._resource.from_dict(current))
        except Exception as exc:
            log.warning("lease %s/%s not released: %s", self.namespace, self.name, exc)
