"""GPU product names: GFD's label form of an NVML name and product lookups by any spelling."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cudasched.knowledge import GFD_UNDEFINED_FAMILY, KnowledgeBase, gfd_product_label
from cudasched.knowledge.naming import candidate_keys, product_key
from cudasched.vocab.errors import InputError
from tests.support.versions import cc


def test_gfd_product_label() -> None:
    assert gfd_product_label("NVIDIA A100 80GB PCIe") == "NVIDIA-A100-80GB-PCIe"
    assert gfd_product_label("Tesla T4") == "Tesla-T4"
    assert gfd_product_label("NVIDIA  H100 (SXM) 80GB+") == "NVIDIA-H100-SXM-80GB"


@pytest.mark.parametrize(
    ("name", "product", "compute", "datacenter"),
    [
        ("NVIDIA-A100-SXM4-80GB", "A100", "8.0", True),
        ("NVIDIA A100-SXM4-80GB", "A100", "8.0", True),
        ("nvidia a100-sxm4-80gb", "A100", "8.0", True),
        ("A100-SXM4-80GB", "A100", "8.0", True),
        ("A100-SXM4-40GB", "A100", "8.0", True),
        ("NVIDIA-A100-80GB-PCIe", "A100", "8.0", True),
        ("NVIDIA-A100-SXM4-40GB-MIG-1g.5gb", "A100", "8.0", True),
        ("NVIDIA-A100-SXM4-80GB-MIG-3g.40gb", "A100", "8.0", True),
        ("NVIDIA-A100-SXM4-80GB-SHARED", "A100", "8.0", True),
        ("Tesla T4", "T4", "7.5", True),
        ("Tesla-T4", "T4", "7.5", True),
        ("t4", "T4", "7.5", True),
        ("Tesla-V100-SXM2-16GB", "V100", "7.0", True),
        ("Tesla V100-PCIE-32GB", "V100", "7.0", True),
        ("Tesla-P100-SXM2-16GB", "P100", "6.0", True),
        ("NVIDIA-H100-80GB-HBM3", "H100", "9.0", True),
        ("NVIDIA H100 NVL", "H100", "9.0", True),
        ("H100 SXM5", "H100", "9.0", True),
        ("NVIDIA-H200", "H200", "9.0", True),
        ("NVIDIA-GH200-144G-HBM3e", "GH200", "9.0", True),
        ("NVIDIA-B200", "B200", "10.0", True),
        ("NVIDIA-B300-SXM6-AC", "B300", "10.3", True),
        ("NVIDIA-L40S", "L40S", "8.9", True),
        ("NVIDIA GeForce RTX 4090", "RTX 4090", "8.9", False),
        ("NVIDIA-GeForce-RTX-4090", "RTX 4090", "8.9", False),
        ("GeForce RTX 3090", "RTX 3090", "8.6", False),
        ("RTX 5090", "RTX 5090", "12.0", False),
        ("NVIDIA-RTX-6000-Ada-Generation", "RTX 6000 Ada", "8.9", False),
        (
            "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition",
            "RTX PRO 6000 Blackwell",
            "12.0",
            False,
        ),
        ("NVIDIA-RTX-A6000", "RTX A6000", "8.6", False),
    ],
)
def test_gpu_lookup_normalises_names(
    kb: KnowledgeBase, name: str, product: str, compute: str, datacenter: bool
) -> None:
    info = kb.gpu(name)
    assert info is not None, name
    assert (info.product, info.compute, info.datacenter) == (product, cc(compute), datacenter)


def test_every_listed_name_and_its_gfd_label_resolve_to_the_board(kb: KnowledgeBase) -> None:
    names = 0
    for gpu in kb.gpus():
        for name in gpu.names:
            for spelling in (name, gfd_product_label(name), name.upper()):
                found = kb.gpu(spelling)
                assert found is not None and found.product == gpu.product, spelling
                # Names that differ only by the optional brand prefix are one board.
                assert found.variant in gpu.names, spelling
                assert found.variant.lower().endswith(name.lower()), spelling  # type: ignore[union-attr]
            names += 1
    assert names >= 131  # every listed name of 99 boards


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_gpu_lookup_ignores_case_and_spacing(kb: KnowledgeBase, data: st.DataObject) -> None:
    gpu = data.draw(st.sampled_from(list(kb.gpus())))
    name = data.draw(st.sampled_from(gpu.names))
    flips = data.draw(st.lists(st.booleans(), min_size=len(name), max_size=len(name)))
    cased = "".join(c.upper() if f else c.lower() for c, f in zip(name, flips, strict=True))
    spaced = data.draw(st.sampled_from(["  ", "\t", " "])).join(cased.split(" "))
    found = kb.gpu(f" {spaced} ")
    assert found is not None and found.product == gpu.product


def test_gpu_unknown_and_ambiguous_names(kb: KnowledgeBase) -> None:
    for name in ("", "   ", "NVIDIA", "RTX 6000", "Radeon RX 7900", "A1000"):
        assert kb.gpu(name) is None, name
    # "RTX 6000" is ambiguous; the Turing workstation board is named with its Quadro brand.
    quadro = kb.gpu("Quadro RTX 6000")
    assert quadro is not None and str(quadro.compute) == "7.5"
    short = kb.gpu("H100 SXM5")
    assert short is not None and short.variant is None  # the product, not the PCI-2339 board
    with pytest.raises(InputError):
        kb.gpu(None)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("NVIDIA A100-SXM4-80GB", "a100-sxm4-80gb"),
        ("NVIDIA-A100-SXM4-80GB", "a100-sxm4-80gb"),
        ("  nvidia   a100-sxm4-80gb ", "a100-sxm4-80gb"),
        ("Tesla T4", "t4"),
        ("NVIDIA GeForce RTX 4090", "rtx-4090"),
        ("NVIDIA", "nvidia"),  # a prefix alone is kept: it is the whole name
        ("NVIDIA  H100 (SXM) 80GB+", "h100-sxm-80gb"),
    ],
)
def test_product_key_is_equal_for_every_spelling(name: str, key: str) -> None:
    assert product_key(name) == key


def test_candidate_keys_go_from_board_to_product() -> None:
    assert list(candidate_keys("a100-sxm4-40gb-mig-1g.5gb")) == [
        ("a100-sxm4-40gb-mig-1g.5gb", True),
        ("a100-sxm4-40gb", True),
        ("a100", False),
    ]
    assert list(candidate_keys("h100-80gb-hbm3-shared")) == [
        ("h100-80gb-hbm3-shared", True),
        ("h100-80gb-hbm3", True),
        ("h100", False),
    ]
    assert list(candidate_keys("t4")) == [("t4", True)]


def test_gfd_undefined_family_is_gfds_word() -> None:
    assert GFD_UNDEFINED_FAMILY == "undefined"


# --------------------------------------------------------------------------- issue 11 item 4


@pytest.mark.parametrize(
    ("name", "cc"),
    [
        ("NVIDIA TITAN Xp", "6.1"),
        ("TITAN V", "7.0"),
        ("NVIDIA GeForce RTX 3060", "8.6"),
        ("NVIDIA-GeForce-RTX-4070-Ti-SUPER", "8.9"),
        ("NVIDIA GeForce RTX 5080", "12.0"),
        ("NVIDIA RTX 4000 SFF Ada Generation", "8.9"),
        ("NVIDIA-RTX-A2000-12GB", "8.6"),
        ("NVIDIA RTX PRO 4500 Blackwell", "12.0"),
        ("NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition", "12.0"),
    ],
)
def test_common_cards_are_known(kb: KnowledgeBase, name: str, cc: str) -> None:
    """Cards people run inference on, with the capability NVIDIA's CUDA GPUs page gives."""
    info = kb.gpu(name)
    assert info is not None and str(info.compute) == cc and info.datacenter is False


@pytest.mark.parametrize(
    ("name", "truncated"),
    [
        ("NVIDIA-GeForce", True),  # a name cut after its brand words
        ("NVIDIA-RTX-A200", True),  # ... or mid-number (NVIDIA RTX A2000)
        ("NVIDIA", True),
        ("Tesla", True),
        ("NVIDIA A100-SXM...", True),  # nvidia-smi's own ellipsis
        ("NVIDIA-H10", True),
        ("NVIDIA-RTX-A2000", False),
        ("NVIDIA-H100-80GB-HBM3", False),
        ("NVIDIA-GeForce-RTX-4070", False),  # a product, though a prefix of 4070 Ti
        ("NVIDIA Future GPU 9000", False),  # unknown, but nothing says it was cut
    ],
)
def test_truncated_product_names(kb: KnowledgeBase, name: str, truncated: bool) -> None:
    assert kb.truncated_product(name) is truncated
