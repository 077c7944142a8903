"""Where labels go: the Node object (merge patch) or an NFD ``features.d`` file.

Both publishers follow the same rules: touch only keys the agent owns, write only when
something changed, and remove owned keys that are no longer wanted (a merge patch sets them
to ``null``). Labels of anyone else (GFD, the GPU Operator, users) are never read back into
a patch, so they cannot be overwritten or deleted by accident.
"""

from __future__ import annotations

import logging
import os
import tempfile
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from cudasched.agent.labelers import is_valid_label_value
from cudasched.errors import InputError

__all__ = [
    "DEFAULT_NFD_PATH",
    "EventSink",
    "LabelPublisher",
    "LogEvents",
    "NfdFilePublisher",
    "NodePublisher",
    "label_patch",
    "make_client",
]

log = logging.getLogger("cudasched.agent")

DEFAULT_NFD_PATH = "/etc/kubernetes/node-feature-discovery/features.d/cudasched"
EVENT_COMPONENT = "cudasched-agent"


def label_patch(
    current: Mapping[str, str], desired: Mapping[str, str], owned: frozenset[str]
) -> dict[str, str | None]:
    """The merge-patch ``labels`` map turning ``current`` into ``desired`` on owned keys only.

    Empty when nothing changes, so callers can skip the API call entirely.
    """
    stray = sorted(k for k in desired if k not in owned)
    if stray:
        raise ValueError(f"refusing to publish keys the agent does not own: {stray}")
    patch: dict[str, str | None] = {k: v for k, v in desired.items() if current.get(k) != v}
    patch.update({k: None for k in current if k in owned and k not in desired})
    return dict(sorted(patch.items()))


class LabelPublisher(Protocol):
    async def labels(self) -> dict[str, str]:
        """Labels currently published (for the Node: all of its labels)."""
        ...

    async def apply(self, desired: Mapping[str, str], owned: frozenset[str]) -> bool:
        """Publish ``desired``; return whether anything was written."""
        ...


class EventSink(Protocol):
    async def event(self, *, type: str, reason: str, message: str) -> None: ...


class LogEvents:
    """Events for setups without API access (NFD file mode without a kubeconfig)."""

    async def event(self, *, type: str, reason: str, message: str) -> None:
        log.warning("event %s %s: %s", type, reason, message)


def make_client(kubeconfig: str | None = None) -> Any:
    """A lightkube ``AsyncClient`` from ``kubeconfig`` or the environment (in-cluster first)."""
    from lightkube import AsyncClient, KubeConfig
    from lightkube.core.exceptions import ConfigError

    try:
        config = KubeConfig.from_file(kubeconfig) if kubeconfig else KubeConfig.from_env()
    except (ConfigError, OSError) as exc:
        where = kubeconfig or "in-cluster service account / $KUBECONFIG / ~/.kube/config"
        raise InputError(f"no usable Kubernetes configuration ({where}): {exc}") from None
    return AsyncClient(config=config, field_manager=EVENT_COMPONENT)


class NodePublisher:
    """Labels on the Node object and Events about it, through lightkube's async client."""

    def __init__(self, client: Any, node_name: str, event_namespace: str = "default") -> None:
        self.client = client
        self.node_name = node_name
        self.event_namespace = event_namespace
        self._uid: str | None = None

    async def labels(self) -> dict[str, str]:
        from lightkube.resources.core_v1 import Node

        node = await self.client.get(Node, self.node_name)
        self._uid = node.metadata.uid if node.metadata else None
        return dict((node.metadata.labels if node.metadata else None) or {})

    async def apply(self, desired: Mapping[str, str], owned: frozenset[str]) -> bool:
        from lightkube.resources.core_v1 import Node
        from lightkube.types import PatchType

        patch = label_patch(await self.labels(), desired, owned)
        if not patch:
            return False
        await self.client.patch(
            Node,
            self.node_name,
            {"metadata": {"labels": patch}},
            patch_type=PatchType.MERGE,
        )
        log.info("patched node %s labels: %s", self.node_name, patch)
        return True

    async def event(self, *, type: str, reason: str, message: str) -> None:
        """A core/v1 Event whose involvedObject is the Node, named like kubelet's events."""
        from lightkube.models.core_v1 import EventSource, ObjectReference
        from lightkube.models.meta_v1 import ObjectMeta
        from lightkube.resources.core_v1 import Event

        now = datetime.now(UTC)
        event = Event(
            metadata=ObjectMeta(
                name=f"{self.node_name}.{time.time_ns():x}", namespace=self.event_namespace
            ),
            involvedObject=ObjectReference(
                apiVersion="v1", kind="Node", name=self.node_name, uid=self._uid
            ),
            reason=reason,
            message=message[:1024],
            type=type,
            source=EventSource(component=EVENT_COMPONENT, host=self.node_name),
            reportingComponent=EVENT_COMPONENT,
            reportingInstance=self.node_name,
            firstTimestamp=now,
            lastTimestamp=now,
            count=1,
        )
        await self.client.create(event, namespace=self.event_namespace)


class NfdFilePublisher:
    """An NFD ``features.d`` file of ``key=value`` lines, replaced atomically.

    NFD's ``local`` source turns each line into a node label and drops labels whose lines
    vanish, so the file holds exactly the agent's current labels. It is written to a temporary
    file in the same directory and renamed over the old one: NFD never reads half a file.
    """

    def __init__(self, path: str | Path = DEFAULT_NFD_PATH) -> None:
        self.path = Path(path)

    async def labels(self) -> dict[str, str]:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return {}
        out: dict[str, str] = {}
        for line in text.splitlines():
            if not line.strip() or line.lstrip().startswith("#") or "=" not in line:
                continue
            key, _, value = line.partition("=")
            out[key.strip()] = value.strip()
        return out

    @staticmethod
    def render(labels: Mapping[str, str]) -> str:
        for key, value in labels.items():
            if not is_valid_label_value(value):
                raise ValueError(f"label {key}={value!r} is not a valid label value")
        return "".join(f"{k}={v}\n" for k, v in sorted(labels.items()))

    async def apply(self, desired: Mapping[str, str], owned: frozenset[str]) -> bool:
        stray = sorted(k for k in desired if k not in owned)
        if stray:
            raise ValueError(f"refusing to publish keys the agent does not own: {stray}")
        content = self.render(desired)
        try:
            if self.path.read_text(encoding="utf-8") == content:
                return False
        except FileNotFoundError:
            pass
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", dir=self.path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(content)
                fh.flush()
                os.fsync(fh.fileno())
            os.chmod(tmp, 0o644)
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        log.info("wrote %s (%d labels)", self.path, len(desired))
        return True
