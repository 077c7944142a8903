"""An API server's refusal as lightkube raises it: the HTTP status in ``status.code``, which is
all :func:`cudasched.kube.reflector.status_code` reads, and, where a test gives one, the rest of
the API server's ``Status`` body parsed by lightkube's own model (details, causes). For client
fakes that fail a call with a given status (404 gone, 403 forbidden, 409 conflict...)."""

from __future__ import annotations

from typing import Any

from lightkube.models.meta_v1 import Status


class ApiError(Exception):
    """A call refused with HTTP ``code`` (and the API server's ``Status`` body ``body``)."""

    def __init__(self, code: int, body: dict[str, Any] | None = None) -> None:
        super().__init__(f"HTTP {code}")
        self.status = Status.from_dict({"kind": "Status", "apiVersion": "v1", **(body or {})})
        self.status.code = code


def namespace_terminating(namespace: str, name: str, resource: str) -> ApiError:
    """A create in ``namespace`` while it is being deleted, as the API server's namespace
    lifecycle admission refuses it (apiserver ``pkg/admission/plugin/namespace/lifecycle``)."""
    return ApiError(
        403,
        {
            "status": "Failure",
            "message": f'{resource} "{name}" is forbidden: unable to create new content in '
            f"namespace {namespace} because it is being terminated",
            "reason": "Forbidden",
            "details": {
                "name": name,
                "kind": resource,
                "causes": [
                    {
                        "reason": "NamespaceTerminating",
                        "message": f"namespace {namespace} is being terminated",
                        "field": "metadata.namespace",
                    }
                ],
            },
        },
    )


def namespace_not_found(namespace: str) -> ApiError:
    """A create in ``namespace`` once it is gone (the same admission's live lookup)."""
    return ApiError(
        404,
        {
            "status": "Failure",
            "message": f'namespaces "{namespace}" not found',
            "reason": "NotFound",
            "details": {"name": namespace, "kind": "namespaces"},
        },
    )
