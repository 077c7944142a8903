"""Reading and validating the data files: every entry carries a source, the loader rejects
malformed files, and the architecture rows are well-formed data."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import pytest

from cudasched.knowledge import DATA_FILES, KnowledgeBase, Status
from cudasched.vocab.errors import KnowledgeError
from cudasched.vocab.versions import (
    ComputeCapability,
)
from tests.support.gfd_reference import GFD_FAMILIES
from tests.support.versions import cc, cv

ENTRY_LISTS = {
    "toolkits.yaml": [("releases",)],
    "compat.yaml": [
        ("minor_version_compat",),
        ("forward_compat", "packages"),
        ("driver_branches",),
    ],
    "architectures.yaml": [("architectures",)],
    "gpus.yaml": [("gpus",)],
    "frameworks.yaml": [("pytorch",), ("tensorflow",), ("vllm",)],
    "containers.yaml": [("tritonserver",), ("pytorch",), ("tensorflow",)],
    "drivers.yaml": [
        ("minimum_kernel",),
        ("build_breakages",),
        ("latest_releases",),
        ("earlier_releases",),
    ],
    "gpu-operator.yaml": [
        ("driver_containers",),
        ("operator_versions",),
        ("operator_boards",),
        ("driver_manager", "node_groups"),
    ],
}


def _entries(doc: Mapping[str, Any], path: tuple[str, ...]) -> list[Mapping[str, Any]]:
    node: Any = doc
    for key in path:
        node = node[key]
    assert isinstance(node, list) and node, f"{path} must be a non-empty list"
    return node


def _is_valid_source(value: object, sources: Mapping[str, Any]) -> bool:
    if not isinstance(value, str) or not value.strip():
        return False
    if value in sources:
        return bool(str(sources[value]).strip())
    return value.startswith(("https://", "http://"))


# ---------------------------------------------------------------------------------------------
# Data-file hygiene
# ---------------------------------------------------------------------------------------------


def test_every_entry_in_every_data_file_has_a_source(raw_documents: dict[str, Any]) -> None:
    assert set(ENTRY_LISTS) == set(DATA_FILES)
    checked = 0
    for name, paths in ENTRY_LISTS.items():
        doc = raw_documents[name]
        sources = doc.get("sources", {})
        assert all(str(v).strip() for v in sources.values()), f"{name}: empty named source"
        for path in paths:
            for entry in _entries(doc, path):
                assert _is_valid_source(entry.get("source"), sources), (name, path, entry)
                checked += 1
    assert checked > 250


def test_pytorch_arch_lists_and_defaults_have_their_own_source(
    raw_documents: dict[str, Any],
) -> None:
    doc = raw_documents["frameworks.yaml"]
    defaults = arch_lists = 0
    for release in doc["pytorch"]:
        if "pypi_default" in release:
            assert _is_valid_source(release.get("pypi_default_source"), doc["sources"])
            defaults += 1
        for tag, variant in release["variants"].items():
            if "arch_list" in variant:
                assert _is_valid_source(variant.get("arch_source"), doc["sources"]), tag
                arch_lists += 1
    assert defaults >= 3 and arch_lists >= 14


def test_loaded_facts_all_carry_a_source(kb: KnowledgeBase) -> None:
    facts: list[Any] = [
        *kb.toolkits(),
        *kb.architectures(),
        *kb.gpus(),
        *kb.minor_compat(),
        *kb.forward_compat_packages(),
        *kb.driver_branches(),
        *kb.ngc_releases(),
    ]
    assert facts
    for fact in facts:
        assert fact.source.strip(), fact


def test_unknown_and_disputed_are_explicit(kb: KnowledgeBase) -> None:
    for row in kb.toolkits():
        assert (row.min_driver is None) == (row.status in (Status.UNKNOWN, Status.DISPUTED))
        if row.status is Status.DISPUTED:
            assert len(row.alternatives) >= 2
    t134 = kb.toolkit(cv("13.4"))
    assert t134 is not None and t134.status is Status.DISPUTED
    assert {a.branch for a in t134.alternatives} == {615, 616}
    t135 = kb.toolkit(cv("13.5"))
    assert t135 is not None and t135.status is Status.UNKNOWN and t135.min_driver is None


def test_architecture_rows_do_not_overlap(raw_documents: dict[str, Any], kb: KnowledgeBase) -> None:
    seen: set[ComputeCapability] = set()
    for row in raw_documents["architectures.yaml"]["architectures"]:
        ccs = {cc(c) for c in row["compute"]}
        assert not ccs & seen, row
        seen |= ccs
    assert {c for a in kb.architectures() for c in a.compute} == seen


def test_every_family_in_the_yaml_is_a_gfd_word(raw_documents: dict[str, Any]) -> None:
    rows = raw_documents["architectures.yaml"]["architectures"]
    assert len(rows) >= 22
    for row in rows:
        assert row["family"] in GFD_FAMILIES, row
        assert row.get("gfd_family", row["family"]) in GFD_FAMILIES | {"undefined"}, row


# ---------------------------------------------------------------------------------------------
# Loader validation
# ---------------------------------------------------------------------------------------------


def _broken(
    raw_documents: dict[str, Any], name: str, path: tuple[str, ...], index: int
) -> tuple[dict[str, Any], dict[str, Any]]:
    """A deep copy of the data files and the entry to corrupt in it."""
    docs = copy.deepcopy(raw_documents)
    return docs, _entries(docs[name], path)[index]


def test_loader_rejects_entries_without_a_source(raw_documents: dict[str, Any]) -> None:
    docs, entry = _broken(raw_documents, "gpus.yaml", ("gpus",), 0)
    del entry["source"]
    with pytest.raises(KnowledgeError, match="source"):
        KnowledgeBase.from_documents(docs)


def test_loader_rejects_unknown_named_sources(raw_documents: dict[str, Any]) -> None:
    docs, entry = _broken(raw_documents, "toolkits.yaml", ("releases",), 0)
    entry["source"] = "no_such_source"
    with pytest.raises(KnowledgeError, match="no_such_source"):
        KnowledgeBase.from_documents(docs)


def test_loader_rejects_overlapping_architectures(raw_documents: dict[str, Any]) -> None:
    docs, entry = _broken(raw_documents, "architectures.yaml", ("architectures",), 0)
    entry["compute"] = [*entry["compute"], "7.5"]
    with pytest.raises(KnowledgeError, match=r"7\.5"):
        KnowledgeBase.from_documents(docs)


def test_loader_rejects_a_gfd_family_that_repeats_family_or_has_no_source(
    raw_documents: dict[str, Any],
) -> None:
    docs, entry = _broken(raw_documents, "architectures.yaml", ("architectures",), 0)
    entry["gfd_family"] = entry["family"]
    entry["gfd_family_source"] = "gfd_resource_go"
    with pytest.raises(KnowledgeError, match="repeats family"):
        KnowledgeBase.from_documents(docs)
    docs, entry = _broken(raw_documents, "architectures.yaml", ("architectures",), 0)
    entry["gfd_family"] = "undefined"
    with pytest.raises(KnowledgeError, match="gfd_family_source"):
        KnowledgeBase.from_documents(docs)


def test_loader_rejects_a_gpu_whose_arch_disagrees(raw_documents: dict[str, Any]) -> None:
    docs, entry = _broken(raw_documents, "gpus.yaml", ("gpus",), 0)
    entry["arch"] = "Hopper"
    with pytest.raises(KnowledgeError, match="Hopper"):
        KnowledgeBase.from_documents(docs)


def test_loader_rejects_a_host_arch_kubernetes_does_not_name(
    raw_documents: dict[str, Any],
) -> None:
    docs, entry = _broken(raw_documents, "gpus.yaml", ("gpus",), 0)
    entry["host_arch"] = "aarch64"
    with pytest.raises(KnowledgeError, match="host_arch is one of amd64, arm64"):
        KnowledgeBase.from_documents(docs)


def test_arm64_only_gpus_say_so_with_a_source(kb: KnowledgeBase) -> None:
    """Grace superchips and AWS's G5g T4G come only in arm64 servers."""
    for name in ("GH200", "GB200", "T4G"):
        info = kb.gpu(name)
        assert info is not None and info.host_arch == "arm64" and info.host_arch_source
    h100 = kb.gpu("H100")
    assert h100 is not None and h100.host_arch is None


def test_loader_rejects_a_second_ga_row(raw_documents: dict[str, Any]) -> None:
    docs, entry = _broken(raw_documents, "toolkits.yaml", ("releases",), 0)
    docs["toolkits.yaml"]["releases"].append({**entry, "version": "13.5.9"})
    with pytest.raises(KnowledgeError, match="GA"):
        KnowledgeBase.from_documents(docs)


def test_loader_rejects_a_missing_file(raw_documents: dict[str, Any]) -> None:
    docs = {k: v for k, v in raw_documents.items() if k != "gpus.yaml"}
    with pytest.raises(KnowledgeError, match=r"gpus\.yaml"):
        KnowledgeBase.from_documents(docs)


def test_load_reads_fresh_objects_each_time() -> None:
    first, second = KnowledgeBase.load(), KnowledgeBase.load()
    assert first is not second
    assert first.min_driver(cv("12.4")) == second.min_driver(cv("12.4"))


class _Kept:
    """A :class:`~cudasched.knowledge.loading.ParsedCache` in memory, answering ``held``."""

    def __init__(self, held: dict[str, object] | None) -> None:
        self.held = held
        self.stored: list[dict[str, object]] = []

    def load(self, raw: Mapping[str, bytes]) -> dict[str, object] | None:
        if raw.keys() == {"bundle.yaml"}:
            return None  # the bundle's metadata is never held: it is parsed and stored
        return self.held

    def store(self, raw: Mapping[str, bytes], docs: Mapping[str, object]) -> None:
        if raw.keys() != {"bundle.yaml"}:
            self.stored.append(dict(docs))


def test_documents_a_cache_holds_are_used_as_they_are(raw_documents: dict[str, Any]) -> None:
    cache = _Kept(copy.deepcopy(raw_documents))
    del cache.held["gpus.yaml"]["gpus"][1:]  # type: ignore[index]
    kb = KnowledgeBase.load(cache)
    assert len(list(kb.gpus())) == 1 and cache.stored == []


def test_a_cache_that_holds_other_files_is_parsed_past_and_given_the_parse() -> None:
    cache = _Kept({"gpus.yaml": {}})
    kb = KnowledgeBase.load(cache)
    assert len(list(kb.gpus())) > 1
    [stored] = cache.stored
    assert set(stored) == set(DATA_FILES)
