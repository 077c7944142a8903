"""DNS-1123 names as apimachinery validates them (``IsDNS1123Label``, ``IsDNS1123Subdomain``):
the one check of the namespaces and object names cudasched writes or asks for."""

from __future__ import annotations

import pytest

from cudasched.vocab.labelsyntax import dns_label_ok, dns_subdomain_ok, label_value_ok


@pytest.mark.parametrize(
    ("name", "label", "subdomain"),
    [
        ("cudasched", True, True),
        ("gpu-system", True, True),
        ("a", True, True),
        ("0abc9", True, True),
        ("a" * 63, True, True),
        ("a" * 64, False, True),  # a subdomain's parts are not held to 63 by apimachinery
        ("system.cluster-critical", False, True),
        ("a." * 126 + "a", False, True),  # 253 characters
        ("a." * 126 + "ab", False, False),  # 254
        ("", False, False),
        ("Upper", False, False),
        ("-lead", False, False),
        ("trail-", False, False),
        ("under_score", False, False),
        ("dot.", False, False),
        (".dot", False, False),
        ("a..b", False, False),
        ("gpu\n", False, False),  # a trailing newline never passes (fullmatch, not $)
        ("../x", False, False),
    ],
)
def test_dns_names(name: str, label: bool, subdomain: bool) -> None:
    assert (dns_label_ok(name), dns_subdomain_ok(name)) == (label, subdomain)


def test_what_is_not_text_is_no_name() -> None:
    assert not dns_label_ok(7)  # type: ignore[arg-type]
    assert not dns_subdomain_ok(None)  # type: ignore[arg-type]
    assert not label_value_ok(b"x")  # type: ignore[arg-type]


@pytest.mark.parametrize("value", ["12.4\n", "\n", "x\n"])
def test_a_trailing_newline_is_no_label_value(value: str) -> None:
    assert not label_value_ok(value)
