"""The ImageFacts custom resource as manifests: its CustomResourceDefinition (a structural
schema of what :mod:`cudasched.knowledge.imagefacts` writes, printer columns a person reads with
``kubectl get imagefacts``), who may write it, and the grant a resolver needs.

* **The CRD** is always installed (``cudasched manifests`` in every mode, ``deploy/base``): a
  person may read and correct facts (``spec.override``) whether or not a resolver writes them,
  and the commands read them with ``--live``.
* **Written only by cudasched's service accounts** (the webhook's and the policy controller's,
  whose resolvers read images alike). The facts are the object's ``status`` (the status
  subresource: a ``kubectl edit`` or ``apply`` of the object never changes it).
  RBAC gives those accounts ``create`` of objects and ``patch`` of their status, but
  RBAC cannot refuse anything to a cluster admin, so a ValidatingAdmissionPolicy refuses every
  write of the status subresource by anyone else. People write ``spec.override``, which wins
  over what was read, or delete the object to have it read again.
* **The grant** (``--image-resolver``): ``get`` and ``create`` on ImageFacts and ``patch`` on
  their status, what :mod:`cudasched.registry.factstore` calls, in a ClusterRole of its own.
"""

from __future__ import annotations

import json
from typing import Any

from cudasched.install.naming import APP, POLICY_CONTROLLER, object_labels, object_meta
from cudasched.vocab.kinds import IMAGE_FACTS

__all__ = [
    "WRITERS",
    "image_facts_crd",
    "image_facts_grant",
    "image_facts_policy",
]

JSON = dict[str, Any]

_STRING: JSON = {"type": "string", "maxLength": 4096}
_SHORT: JSON = {"type": "string", "maxLength": 256}
_BOOL: JSON = {"type": "boolean"}
_INT: JSON = {"type": "integer", "minimum": 0}
_CUDA: JSON = {"type": "string", "pattern": r"^[0-9]{1,2}\.[0-9]{1,2}$"}
_STRING_MAP: JSON = {"type": "object", "maxProperties": 64, "additionalProperties": _STRING}


def _obj(properties: JSON, **extra: Any) -> JSON:
    return {"type": "object", "properties": properties, **extra}


def _array(items: JSON, most: int) -> JSON:
    return {"type": "array", "maxItems": most, "items": items}


def _contents_schema() -> JSON:
    """What an image's SBOM and layers were found to carry (``ImageContents.to_dict``)."""
    fact = _obj(
        {
            "kind": _SHORT,
            "what": _STRING,
            "cuda": _CUDA,
            "floor": _BOOL,
            "layer": _STRING,
            "path": _STRING,
            "why": _STRING,
        }
    )
    compat = _obj(
        {
            "cuda": _CUDA,
            "driverBranches": _array(_INT, 64),
            "devices": _array(_INT, 64),
            "format": _INT,
            "compatDriver": _SHORT,
            "layer": _STRING,
            "path": _STRING,
            "note": _BOOL,
        }
    )
    return _obj(
        {
            "image": _STRING,
            "digest": _SHORT,
            "cuda": _CUDA,
            "lowerBound": _BOOL,
            "rule": _STRING,
            "unknown": _STRING,
            "facts": _array(fact, 64),
            "compat": compat,
            "notes": _array(_STRING, 16),
            "stopped": _STRING,
            "sbom": _BOOL,
            "layersRead": _INT,
            "layersTotal": _INT,
            "bytesRead": _INT,
        },
        description="What the image's SBOM and layers were found to carry, each fact with "
        "the layer and path it was found at.",
    )


def _schema() -> JSON:
    override = _obj(
        {
            "cuda": {**_CUDA, "description": "The CUDA the image needs, e.g. '12.4'."},
            "reason": {"type": "string", "maxLength": 1024},
        },
        required=["cuda"],
        description="A person's correction: wins over what cudasched read.",
    )
    config = _obj(
        {
            "cuda": _CUDA,
            "from": _STRING,
            "env": _STRING_MAP,
            "labels": _STRING_MAP,
            "mirror": _STRING,
        },
        description="The config's CUDA facts (its NVIDIA_REQUIRE_*, CUDA_VERSION and "
        "NV_CUDA_COMPAT_PACKAGE env, its CUDA labels; never the rest of its env).",
    )
    status = _obj(
        {
            "digest": {"type": "string", "pattern": "^sha256:[0-9a-f]{64}$"},
            "platform": _SHORT,
            "image": _STRING,
            "references": _array(_STRING, 16),
            "observedTime": {"type": "string", "format": "date-time"},
            "config": config,
            "contents": _contents_schema(),
        },
        description="What cudasched read of the image (written by its service account only).",
    )
    return _obj(
        {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": _obj({"override": override}),
            "status": status,
        },
        description="What an image, named by its digest, needs: read by cudasched from its "
        "registry (status), corrected by a person (spec.override).",
    )


def _column(name: str, path: str, description: str, kind: str = "string") -> JSON:
    return {"name": name, "type": kind, "jsonPath": path, "description": description}


def image_facts_crd() -> JSON:
    """The ImageFacts CustomResourceDefinition (cluster-scoped, one object per digest); no
    two of its parts are one object, so its YAML has no anchors a person must follow."""
    kind = IMAGE_FACTS
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{kind.plural}.{kind.group}", "labels": object_labels("webhook")},
        "spec": {
            "group": kind.group,
            "names": {
                "kind": kind.kind,
                "listKind": f"{kind.kind}List",
                "plural": kind.plural,
                "singular": kind.kind.lower(),
                "categories": ["cudasched"],
            },
            "scope": "Cluster",
            "versions": [
                {
                    "name": kind.version,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": _schema()},
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": [
                        _column("Image", ".status.image", "The reference last read as"),
                        _column("Config", ".status.config.cuda", "CUDA its config names"),
                        _column("Contents", ".status.contents.cuda", "CUDA its layers need"),
                        _column("Override", ".spec.override.cuda", "A person's correction"),
                        _column("Age", ".metadata.creationTimestamp", "", "date"),
                    ],
                }
            ],
        },
    }
    fresh: JSON = json.loads(json.dumps(crd))
    return fresh


#: The service accounts whose image resolver writes facts: the webhook's and the policy
#: controller's.
WRITERS = (APP, POLICY_CONTROLLER)


def _accounts(namespace: str) -> str:
    """The writers' user names as a CEL list literal."""
    return "[" + ", ".join(f"'system:serviceaccount:{namespace}:{a}'" for a in WRITERS) + "]"


def image_facts_policy(namespace: str) -> list[JSON]:
    """The ValidatingAdmissionPolicy (and binding) that lets only cudasched's service accounts
    in ``namespace`` (:data:`WRITERS`) write an ImageFacts status."""
    name = f"{APP}-{namespace}-image-facts"
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": object_meta(name, None, "webhook"),
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [IMAGE_FACTS.group],
                        "apiVersions": ["*"],
                        "operations": ["CREATE", "UPDATE"],
                        "resources": [f"{IMAGE_FACTS.plural}/status"],
                    }
                ]
            },
            "validations": [
                {
                    "expression": f"request.userInfo.username in {_accounts(namespace)}",
                    "message": "only cudasched writes what it read of an image; correct it in "
                    "spec.override, or delete the object to have it read again",
                    "reason": "Forbidden",
                }
            ],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": object_meta(name, None, "webhook"),
        "spec": {"policyName": name, "validationActions": ["Deny"]},
    }
    return [policy, binding]


def image_facts_grant() -> list[JSON]:
    """The rules on ImageFacts of a resolver that shares facts (``--image-resolver``): the
    webhook's, and the policy controller's."""
    group, plural = IMAGE_FACTS.group, IMAGE_FACTS.plural
    return [
        {"apiGroups": [group], "resources": [plural], "verbs": ["get", "create"]},
        {"apiGroups": [group], "resources": [f"{plural}/status"], "verbs": ["patch"]},
    ]
