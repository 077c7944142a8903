"""A declared kind as the resource class lightkube's client asks for.

:mod:`cudasched.vocab.kinds` declares each kind as plain data (group, version, kind, plural,
scope), so the words every stage uses carry no client library; this is where a kind meets the
client. :func:`resource_of` gives a lightkube generic resource class, so objects come back as
plain ``dict``s (never typed models) whether the kind is built in or a CRD. The classes are made
on call and not registered in lightkube's resource registry, which keeps its typed ``Node``,
``Pod`` and ``Event`` models untouched for code that wants them.
"""

from __future__ import annotations

from typing import Any

from cudasched.vocab.kinds import Kind

__all__ = ["resource_of", "status_resource_of"]


def resource_of(kind: Kind) -> Any:
    """A lightkube generic resource class for ``kind`` (objects as plain dicts)."""
    from lightkube.generic_resource import (
        GenericGlobalResource,
        GenericNamespacedResource,
        create_api_info,
    )

    base = GenericNamespacedResource if kind.namespaced else GenericGlobalResource
    api_info = create_api_info(kind.group, kind.version, kind.kind, kind.plural)
    return type(kind.kind, (base,), {"_api_info": api_info, "__module__": __name__})


def status_resource_of(kind: Kind) -> Any:
    """The class of ``kind``'s status subresource (``/status``), made the way
    lightkube makes it for the generic resources it registers, without registering one."""
    from lightkube.core.resource import ApiInfo, ResourceDef
    from lightkube.generic_resource import GenericGlobalStatus, GenericNamespacedStatus

    base = GenericNamespacedStatus if kind.namespaced else GenericGlobalStatus
    parent = ResourceDef(kind.group, kind.version, kind.kind)
    api_info = ApiInfo(
        resource=parent,
        parent=parent,
        plural=kind.plural,
        verbs=["get", "patch", "put"],
        action="status",
    )
    return type(f"{kind.kind}Status", (base,), {"_api_info": api_info, "__module__": __name__})
