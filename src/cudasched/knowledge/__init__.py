"""The CUDA knowledge base: NVIDIA's compatibility tables, GPUs, frameworks and NGC containers.

``KnowledgeBase.load()`` reads the YAML files bundled in ``cudasched/data`` and answers every
question the engine, the placement compiler, the webhook and the agent ask about CUDA. The
package's modules: ``records`` (the fact types), ``naming`` (GPU product names), ``frameworks``
(framework specs), ``loading`` (data files into records) and ``base`` (the queries). Import
from here; the names below are the package's API.
"""

from __future__ import annotations

from cudasched.knowledge.base import KnowledgeBase
from cudasched.knowledge.loading import DATA_FILES
from cudasched.knowledge.naming import GFD_UNDEFINED_FAMILY, gfd_product_label
from cudasched.knowledge.records import (
    ArchInfo,
    ContainerRelease,
    DriverBranch,
    FcCell,
    ForwardCompatPackage,
    GpuInfo,
    MinorCompat,
    ReleaseKind,
    Status,
    ToolkitRelease,
)

__all__ = [
    "DATA_FILES",
    "GFD_UNDEFINED_FAMILY",
    "ArchInfo",
    "ContainerRelease",
    "DriverBranch",
    "FcCell",
    "ForwardCompatPackage",
    "GpuInfo",
    "KnowledgeBase",
    "MinorCompat",
    "ReleaseKind",
    "Status",
    "ToolkitRelease",
    "gfd_product_label",
]
