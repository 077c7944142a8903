"""The node agent: discover driver, CUDA and GPU facts on a node and publish them as labels.

Sources (``nvml``, ``nvidia_smi``, ``host``) turn raw input into :class:`DriverFacts`;
``labelers`` turn facts into label maps; ``publish`` writes them to the Node or an NFD file;
``loop`` runs the cycle and handles failure (``cudasched.install.agent`` deploys it). Nothing
here does I/O at import time: NVML is loaded and initialised on the first probe.
"""

from __future__ import annotations

from cudasched.agent.discovery import Discovery, default_discovery
from cudasched.agent.loop import Agent, StepResult
from cudasched.agent.nvidia_smi import NvidiaSmiSource, parse_nvidia_smi
from cudasched.agent.nvml import NvmlSession, NvmlSource
from cudasched.agent.publish import NfdFilePublisher, NodePublisher, label_patch
from cudasched.nodes.hostfacts import DiscoveryError, DriverFacts, GpuFacts, HostFacts, Reason
from cudasched.nodes.labelers import build_labels, enrich, failure_labels, owned_keys

__all__ = [
    "Agent",
    "Discovery",
    "DiscoveryError",
    "DriverFacts",
    "GpuFacts",
    "HostFacts",
    "NfdFilePublisher",
    "NodePublisher",
    "NvidiaSmiSource",
    "NvmlSession",
    "NvmlSource",
    "Reason",
    "StepResult",
    "build_labels",
    "default_discovery",
    "enrich",
    "failure_labels",
    "label_patch",
    "owned_keys",
    "parse_nvidia_smi",
]
