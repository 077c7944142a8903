"""Every fact cites its source: the rows that do not are found, wherever they are."""

from __future__ import annotations

from cudasched.knowledge.bundle import TABLES
from cudasched.knowledge.citations import unsourced_rows
from tests.support.bundles import builtin_tables


def test_every_row_of_the_builtin_tables_cites_its_source() -> None:
    tables = builtin_tables()
    found = {name: unsourced_rows(name, tables[name]) for name in TABLES}
    assert found == {name: [] for name in TABLES}


def test_a_row_without_a_source_is_named_by_its_place_and_identity() -> None:
    tables = builtin_tables()
    drivers = tables["drivers.yaml"]
    index = next(i for i, r in enumerate(drivers["latest_releases"]) if r["branch"] == 610)
    del drivers["latest_releases"][index]["source"]
    drivers["earlier_releases"][0]["source"] = "  "
    assert unsourced_rows("drivers.yaml", drivers) == [
        f"latest_releases[{index}] (branch 610)",
        f"earlier_releases[0] (version {drivers['earlier_releases'][0]['version']})",
    ]


def test_sections_rows_within_rows_and_values() -> None:
    tables = builtin_tables()
    drivers = tables["drivers.yaml"]
    del drivers["kernel_modules"]["open_first_branch"]["source"]
    drivers["build_id"] = 7
    assert unsourced_rows("drivers.yaml", drivers) == [
        "kernel_modules.open_first_branch",
        "build_id (a value with no source)",
    ]
    frameworks = tables["frameworks.yaml"]
    variants = frameworks["pytorch"][0]["variants"]
    assert all("source" not in v for v in variants.values())
    assert unsourced_rows("frameworks.yaml", frameworks) == [], "covered by the release row"
    operator = tables["gpu-operator.yaml"]
    del operator["precompiled"]["source"]
    found = unsourced_rows("gpu-operator.yaml", operator)
    assert found[0] == "precompiled.dists", "a section without a source: each of its rows"


def test_the_image_tables_mirrors_and_base_gates() -> None:
    images = builtin_tables()["images.yaml"]
    images["mirrors"]["harbor.example.com/ngc"] = "nvcr.io/nvidia"
    assert unsourced_rows("images.yaml", images) == [], "a mirror is a name, not a fact"
    del images["cuda_base_gates"]["releases"][0]["source"]
    assert unsourced_rows("images.yaml", images) == ["cuda_base_gates.releases[0] (cuda 12.8.1)"]
