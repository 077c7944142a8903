"""Where the agent's results go: labels on the Node object (merge patch) or in an NFD
``features.d`` file, and Events about the node (recorded on it, or logged without API access).

Both label publishers follow the same rules: touch only keys the agent owns, write only when
something changed, and remove owned keys that are no longer wanted (a merge patch sets them
to ``null``). Labels of anyone else (GFD, the GPU Operator, users) are never read back into
a patch, so they cannot be overwritten or deleted by accident.
"""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from cudasched.kube.events import EventRecorder, ObjectReference
from cudasched.kube.nodes import patch_node_labels, read_node
from cudasched.nodes.labelers import DEFAULT_NFD_PATH
from cudasched.vocab.labelsyntax import label_value_ok
from cudasched.vocab.objects import labels_of, metadata_of

__all__ = [
    "EVENT_COMPONENT",
    "EventSink",
    "LabelPublisher",
    "LogEvents",
    "NfdFilePublisher",
    "NodeEvents",
    "NodePublisher",
    "label_patch",
]

log = logging.getLogger("cudasched.agent")

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


class NodePublisher:
    """Labels on the Node object, through the Kubernetes API (:mod:`cudasched.kube.nodes`)."""

    def __init__(self, client: Any, node_name: str) -> None:
        self.client = client
        self.node_name = node_name
        self._uid: str | None = None

    @property
    def reference(self) -> ObjectReference:
        """The Node, with the uid of the last read (``None`` before the first)."""
        return ObjectReference(api_version="v1", kind="Node", name=self.node_name, uid=self._uid)

    async def labels(self) -> dict[str, str]:
        node = await read_node(self.client, self.node_name)
        uid = metadata_of(node).get("uid")
        self._uid = uid if isinstance(uid, str) else None
        return labels_of(node)

    async def apply(self, desired: Mapping[str, str], owned: frozenset[str]) -> bool:
        patch = label_patch(await self.labels(), desired, owned)
        if not patch:
            return False
        await patch_node_labels(self.client, self.node_name, patch)
        log.info("patched node %s labels: %s", self.node_name, patch)
        return True


class NodeEvents:
    """Events about the node, recorded on it through :mod:`cudasched.kube.events` and named
    like kubelet's; the Node's uid is the one ``node`` read last."""

    def __init__(self, client: Any, node: NodePublisher, namespace: str = "default") -> None:
        self.node = node
        self.recorder = EventRecorder(
            client,
            reporting_controller=EVENT_COMPONENT,
            reporting_instance=node.node_name,
            namespace=namespace,
            host=node.node_name,
        )

    async def event(self, *, type: str, reason: str, message: str) -> None:
        await self.recorder.record(self.node.reference, type=type, reason=reason, note=message)


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
            if not label_value_ok(value):
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
