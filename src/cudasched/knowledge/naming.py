"""GPU product names: GFD's label form of an NVML name, and the keys product lookups use.

NVML, ``nvidia-smi``, GPU Feature Discovery and people spell one board differently
(``NVIDIA A100-SXM4-80GB``, ``NVIDIA-A100-SXM4-80GB``, ``A100``). :func:`gfd_product_label` is
GFD's sanitising of an NVML name, the one copy used by both the knowledge base and the node
agent; :func:`product_key` and :func:`candidate_keys` reduce every spelling to the keys the
knowledge base indexes its GPUs by.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

__all__ = [
    "BRAND_WORDS",
    "GFD_UNDEFINED_FAMILY",
    "candidate_keys",
    "gfd_product_label",
    "product_key",
]

# The word GFD's nvidia.com/gpu.family carries when it has none for a compute capability.
GFD_UNDEFINED_FAMILY = "undefined"

# Product keys (see :func:`product_key`) that are a brand or series word alone: what a GPU
# name cut off after its first word or two leaves (``NVIDIA-GeForce``), never a product.
BRAND_WORDS = frozenset(
    {
        "nvidia",
        "geforce",
        "tesla",
        "quadro",
        "titan",
        "rtx",
        "gtx",
        "rtx-pro",
        "geforce-rtx",
        "geforce-gtx",
        "quadro-rtx",
        "nvidia-rtx",
        "nvidia-rtx-pro",
    }
)

_GFD_DROPPED_CHARACTERS = re.compile(r"[^A-Za-z0-9\-_. ]")
_OPTIONAL_PREFIXES = ("nvidia-", "tesla-", "geforce-")
_MIG_SUFFIX = re.compile(r"-mig-.*$")
_DESCRIPTOR_WORD = re.compile(r"^(?:\d+gb|\d+g|hbm\d*e?|pcie|sxm\d*|nvl\d*)$")


def gfd_product_label(nvml_name: str) -> str:
    """The ``nvidia.com/gpu.product`` value GFD publishes for an NVML name: characters outside
    ``[A-Za-z0-9-_. ]`` dropped, runs of whitespace joined with ``-``.

    >>> gfd_product_label("NVIDIA A100 80GB PCIe")
    'NVIDIA-A100-80GB-PCIe'
    """
    return "-".join(_GFD_DROPPED_CHARACTERS.sub("", nvml_name).split())


def product_key(name: str) -> str:
    """A lookup key equal for every spelling of one name: GFD-sanitised, lower case, with the
    optional brand prefixes (``NVIDIA``, ``Tesla``, ``GeForce``) removed."""
    # Any whitespace separates words here (GFD itself would delete a tab, not split on it).
    key = re.sub(r"-{2,}", "-", gfd_product_label(" ".join(name.split())).lower()).strip("-")
    changed = True
    while changed:
        changed = False
        for prefix in _OPTIONAL_PREFIXES:
            if key.startswith(prefix) and len(key) > len(prefix):
                key = key[len(prefix) :]
                changed = True
    return key


def candidate_keys(key: str) -> Iterator[tuple[str, bool]]:
    """Keys to try, most specific first, each with whether it still names one board: as given,
    without GFD's sharing/MIG suffixes, then without memory and form-factor words
    (``a100-sxm4-80gb`` -> ``a100``)."""
    yield key, True
    base = _MIG_SUFFIX.sub("", key.removesuffix("-shared"))
    if base != key and base:
        yield base, True
    stripped = "-".join(t for t in base.split("-") if not _DESCRIPTOR_WORD.match(t))
    if stripped and stripped != base:
        yield stripped, False
