"""ImageFacts objects read and written (:mod:`cudasched.knowledge.imagefacts` says what they
hold): one got by name, all listed, one created, its status merge-patched through the status
subresource. Objects come back as plain dicts.

RBAC (:mod:`cudasched.install.imagefacts`): the webhook's service account may ``get``,
``list``, ``watch`` and ``create`` ImageFacts and ``patch`` their status; a
ValidatingAdmissionPolicy lets nobody else write the status. A person reads them, and writes
``spec.override``, with kubectl.

Every failure is an :class:`~cudasched.vocab.errors.InputError` naming the object and the HTTP
status (a missing object is ``None``, an existing one on create is :class:`AlreadyThere`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cudasched.kube.reflector import failure_reason, get_or_none, plain_object, status_code
from cudasched.kube.resources import resource_of, status_resource_of
from cudasched.vocab.errors import InputError
from cudasched.vocab.kinds import IMAGE_FACTS
from cudasched.vocab.labelsyntax import dns_subdomain_ok

__all__ = [
    "AlreadyThere",
    "create_image_facts",
    "get_image_facts",
    "list_image_facts",
    "patch_image_facts_status",
    "read_live_image_facts",
]

FIELD_MANAGER = "cudasched-webhook"


class AlreadyThere(InputError):
    """The object exists (another replica created it first)."""


def _failed(verb: str, name: str, exc: Exception) -> InputError:
    return InputError(f"cannot {verb} ImageFacts {name}: {failure_reason(exc)}")


def _checked(name: str) -> str:
    if not dns_subdomain_ok(name):
        raise InputError(f"cannot read ImageFacts {name!r}: not a DNS-1123 subdomain")
    return name


async def get_image_facts(client: Any, name: str) -> dict[str, Any] | None:
    """The object ``name``, or ``None`` when there is none."""
    return await get_or_none(client, IMAGE_FACTS, _checked(name), what=f"get ImageFacts {name}")


async def list_image_facts(client: Any) -> list[dict[str, Any]]:
    """Every object (an empty list where the CRD is not installed)."""
    out = []
    try:
        async for obj in client.list(resource_of(IMAGE_FACTS)):
            out.append({"apiVersion": IMAGE_FACTS.api_version, "kind": IMAGE_FACTS.kind,
                        **plain_object(obj)})  # fmt: skip
    except Exception as exc:
        if status_code(exc) == 404:
            return []
        raise _failed("list", "objects", exc) from None
    return out


def read_live_image_facts(
    *, kubeconfig: Any = None, context: str | None = None
) -> tuple[list[dict[str, Any]], str]:
    """Every ImageFacts object of the cluster the configuration names, and a note when the
    identity may not list them (then none: the commands answer without them). Blocks."""
    import asyncio

    from cudasched.kube.client import make_client

    client = make_client(kubeconfig=kubeconfig, context=context)

    async def run() -> tuple[list[dict[str, Any]], str]:
        try:
            return await list_image_facts(client), ""
        except InputError as exc:
            if "HTTP 403" in str(exc):
                return [], "not allowed to list imagefacts.cudasched.io: image facts not used"
            raise
        finally:
            await client.close()

    return asyncio.run(run())


async def create_image_facts(client: Any, obj: Mapping[str, Any]) -> dict[str, Any]:
    """Create ``obj`` (its status is not written: the status subresource is)."""
    name = str(obj["metadata"]["name"])
    resource = resource_of(IMAGE_FACTS)
    try:
        made = await client.create(resource(dict(obj)), field_manager=FIELD_MANAGER)
    except Exception as exc:
        if status_code(exc) == 409:
            raise AlreadyThere(f"ImageFacts {name} exists") from None
        raise _failed("create", name, exc) from None
    return plain_object(made)


async def patch_image_facts_status(
    client: Any, name: str, status: Mapping[str, Any]
) -> dict[str, Any]:
    """Merge ``status`` into the object's status (the status subresource)."""
    from lightkube.types import PatchType

    try:
        patched = await client.patch(
            status_resource_of(IMAGE_FACTS),
            _checked(name),
            {"status": dict(status)},
            patch_type=PatchType.MERGE,
            field_manager=FIELD_MANAGER,
        )
    except Exception as exc:
        raise _failed("patch the status of", name, exc) from None
    return plain_object(patched)
