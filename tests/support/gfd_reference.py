"""NVIDIA GPU Feature Discovery's family vocabulary and its getArchFamily rule (v0.20,
internal/lm/resource.go; reference/nvidia-labels.md §1.3), transcribed only so the tests can
check ``architectures.yaml`` against GFD. The product reads families from the data, never from
here.
"""

from __future__ import annotations

from cudasched.vocab.versions import ComputeCapability

GFD_FAMILIES = frozenset(
    {
        "tesla",
        "fermi",
        "kepler",
        "maxwell",
        "pascal",
        "volta",
        "turing",
        "ampere",
        "ada-lovelace",
        "hopper",
        "blackwell",
        "rubin",
    }
)


def gfd_get_arch_family(value: ComputeCapability) -> str:
    """The ``nvidia.com/gpu.family`` word GFD v0.20 prints for a compute capability."""
    if value.major == 7:
        return "volta" if value.minor < 5 else "turing"
    if value.major == 8:
        return "ada-lovelace" if value.minor == 9 else "ampere"
    words = {1: "tesla", 2: "fermi", 3: "kepler", 5: "maxwell", 6: "pascal", 9: "hopper"}
    words |= {10: "blackwell", 12: "blackwell", 13: "rubin"}
    return words.get(value.major, "undefined")
