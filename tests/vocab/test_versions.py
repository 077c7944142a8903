from __future__ import annotations

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cudasched.vocab.errors import InputError, VersionError
from cudasched.vocab.versions import (
    ComputeCapability,
    CudaVersion,
    DriverVersion,
    parse_compute_capability,
    parse_cuda,
    parse_driver,
)


@pytest.mark.parametrize(
    ("text", "expected", "code"),
    [
        ("535.104.05", (535, 104, 5), 535104005),
        ("570.26", (570, 26, 0), 570026000),
        ("550.54.014", (550, 54, 14), 550054014),  # leading zeros
        ("570.124.6", (570, 124, 6), 570124006),  # DRA attribute form
        ("550.90.07", (550, 90, 7), 550090007),
        (" 470.256.02 ", (470, 256, 2), 470256002),
        ("R550.90.07", (550, 90, 7), 550090007),
    ],
)
def test_parse_driver(text: str, expected: tuple[int, int, int], code: int) -> None:
    v = parse_driver(text)
    assert (v.major, v.minor, v.revision) == expected
    assert v.code == code
    assert DriverVersion.from_code(code) == v


def test_driver_string_forms() -> None:
    assert str(parse_driver("550.90.07")) == "550.90.07"
    # Echoed as given (issue 12 item 5): the spelling is not a different version.
    assert str(parse_driver("570.124.6")) == "570.124.6"
    assert str(parse_driver("999.1")) == "999.1"
    assert str(parse_driver("540.4.0")) == "540.4.0"  # Jetson L4T
    assert str(parse_driver("R550.90.07")) == "550.90.07"
    assert parse_driver("540.4.0").code == DriverVersion(540, 4, 0).code == 540004000
    assert str(DriverVersion(550, 90, 7)) == "550.90.07"  # built from numbers: NVIDIA's way
    assert str(DriverVersion.from_code(570124006)) == "570.124.06"
    assert str(parse_driver("570.26")) == "570.26"
    assert parse_driver("570.124.6") == parse_driver("570.124.06")
    assert parse_driver("550.54.14") < parse_driver("550.54.15") < parse_driver("550.90.07")
    assert parse_driver("535.104.05") < parse_driver("550.54.14")


@pytest.mark.parametrize(
    "bad", ["", "abc", "535", "535.104.05.1", "535.-1", "v535.1", "535..1", "5350000.1", 12.4, True]
)
def test_parse_driver_rejects(bad: object) -> None:
    with pytest.raises(VersionError) as exc:
        parse_driver(bad)  # type: ignore[arg-type]
    assert repr(bad) in str(exc.value)
    assert "535.104.05" in str(exc.value)  # names the accepted forms
    assert isinstance(exc.value, InputError)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("12", (12, 0, None)),
        ("12.4", (12, 4, None)),
        ("12.4.1", (12, 4, 1)),
        ("cu124", (12, 4, None)),
        ("cu118", (11, 8, None)),
        ("cu92", (9, 2, None)),
        ("cu130", (13, 0, None)),
        ("12040", (12, 4, None)),
        (12040, (12, 4, None)),
        ("13000", (13, 0, None)),
        ("cuda12.4", (12, 4, None)),
        ("CUDA-12.8", (12, 8, None)),
    ],
)
def test_parse_cuda(text: str | int, expected: tuple[int, int, int | None]) -> None:
    v = parse_cuda(text)
    assert (v.major, v.minor, v.patch) == expected


def test_cuda_codes_and_order() -> None:
    assert parse_cuda("12.4").code == 12040
    assert parse_cuda("9.2").code == 9020
    assert parse_cuda("12.4.1") == parse_cuda("12.4")  # patch level ignored
    assert parse_cuda("12.10") > parse_cuda("12.9")
    assert parse_cuda("13.0") > parse_cuda("12.9")
    assert str(parse_cuda("12.4.1")) == "12.4.1"
    assert str(parse_cuda("12.4.1").release) == "12.4"


@pytest.mark.parametrize(
    "bad", ["", "x", "0.1", "12.4.1.2", "cu1", "12.", "999", 999, "12.abc", None]
)
def test_parse_cuda_rejects(bad: object) -> None:
    with pytest.raises(VersionError) as exc:
        parse_cuda(bad)  # type: ignore[arg-type]
    assert "cu124" in str(exc.value)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("8.6", (8, 6)),
        ("sm_86", (8, 6)),
        ("sm_90a", (9, 0)),
        ("compute_90", (9, 0)),
        ("86", (8, 6)),
        ("120", (12, 0)),
        ("sm_100f", (10, 0)),
        ("12.0", (12, 0)),
        (75, (7, 5)),
    ],
)
def test_parse_compute_capability(text: str | int, expected: tuple[int, int]) -> None:
    cc = parse_compute_capability(text)
    assert (cc.major, cc.minor) == expected
    assert ComputeCapability.from_code(cc.code) == cc


@pytest.mark.parametrize("bad", ["", "8", "8.10", "sm86x", "0.5", "1234", "gfx90a"])
def test_parse_compute_capability_rejects(bad: str) -> None:
    with pytest.raises(VersionError) as exc:
        parse_compute_capability(bad)
    assert "sm_86" in str(exc.value)


drivers = st.builds(
    DriverVersion,
    st.integers(100, 999),
    st.integers(0, 999),
    st.integers(0, 999),
)
cudas = st.builds(CudaVersion, st.integers(1, 99), st.integers(0, 9))
ccs = st.builds(ComputeCapability, st.integers(1, 99), st.integers(0, 9))


@given(drivers, drivers)
def test_driver_code_order_matches_version_order(a: DriverVersion, b: DriverVersion) -> None:
    assert (a < b) == (a.code < b.code)
    assert parse_driver(str(a)) == a
    assert DriverVersion.from_code(a.code) == a


@given(cudas, cudas)
def test_cuda_code_order_matches_version_order(a: CudaVersion, b: CudaVersion) -> None:
    assert (a < b) == (a.code < b.code)
    assert parse_cuda(str(a)) == a
    assert CudaVersion.from_code(a.code) == a


@given(ccs, ccs)
def test_cc_code_order_matches_version_order(a: ComputeCapability, b: ComputeCapability) -> None:
    assert (a < b) == (a.code < b.code)
    assert parse_compute_capability(str(a)) == a
    assert parse_compute_capability(a.sm) == a


@given(st.text(max_size=20))
def test_parsers_never_crash_on_arbitrary_text(text: str) -> None:
    for parse in (parse_driver, parse_cuda, parse_compute_capability):
        with contextlib.suppress(VersionError):
            parse(text)
