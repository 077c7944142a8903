"""A bundle on disk, as a directory or a tar archive: read back whole, with the same digest,
and nothing but regular files at the top."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cudasched.knowledge.bundle import META_FILE, BundleError, builtin_bundle
from cudasched.knowledge.bundlefiles import (
    SIGNATURES_FILE,
    archive_bytes,
    directory_files,
    is_archive_name,
    read_bundle_path,
)
from cudasched.knowledge.signing import load_private_key
from tests.support.bundles import ed25519_pair, write


def test_a_directory_reads_back_with_the_same_digest_and_signatures(tmp_path: Path) -> None:
    bundle = builtin_bundle()
    private, _ = ed25519_pair()
    signature = load_private_key(private, "key").sign(bundle.digest)
    found = read_bundle_path(write(tmp_path / "b", bundle, [signature]))
    assert found.bundle == bundle and found.bundle.digest == bundle.digest
    assert found.signatures == (signature,)
    assert (tmp_path / "b" / META_FILE).read_text().startswith("# A cudasched knowledge bundle")


@pytest.mark.parametrize("name", ["bundle.tar", "bundle.tar.gz", "bundle.tgz"])
def test_an_archive_reads_back_with_the_same_digest(tmp_path: Path, name: str) -> None:
    bundle = builtin_bundle()
    target = tmp_path / name
    assert is_archive_name(target)
    data = archive_bytes(directory_files(bundle), compress=not name.endswith(".tar"))
    target.write_bytes(data)
    assert read_bundle_path(target).bundle.digest == bundle.digest
    assert archive_bytes(directory_files(bundle), compress=True) == archive_bytes(
        directory_files(bundle), compress=True
    ), "the same files give the same archive"


def _tar(members: list[tarfile.TarInfo], payloads: list[bytes]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:") as archive:
        for info, payload in zip(members, payloads, strict=True):
            info.size = len(payload)
            archive.addfile(info, io.BytesIO(payload))
    return out.getvalue()


def _link(name: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = tarfile.SYMTYPE
    info.linkname = "/etc/passwd"
    return info


@pytest.mark.parametrize(
    ("member", "words"),
    [
        (tarfile.TarInfo("tables/gpus.yaml"), "is not a file at the archive's top"),
        (tarfile.TarInfo("../bundle.yaml"), "is not a file at the archive's top"),
        (_link("gpus.yaml"), "is not a file at the archive's top"),
    ],
)
def test_an_archive_holds_only_files_at_its_top(
    tmp_path: Path, member: tarfile.TarInfo, words: str
) -> None:
    target = tmp_path / "b.tar"
    target.write_bytes(_tar([member], [b"x"]))
    with pytest.raises(BundleError, match=words):
        read_bundle_path(target)


def test_what_is_not_a_bundle_is_refused_saying_why(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(BundleError, match=r"no bundle\.yaml, so not a bundle"):
        read_bundle_path(tmp_path / "empty")
    written = write(tmp_path / "b", builtin_bundle())
    (written / "gpus.yaml").unlink()
    with pytest.raises(BundleError, match=r"lists gpus\.yaml, which is missing"):
        read_bundle_path(written)
    (tmp_path / "junk.tgz").write_bytes(b"\x1f\x8bnot gzip")
    with pytest.raises(BundleError, match="not a gzip archive"):
        read_bundle_path(tmp_path / "junk.tgz")
    (written / SIGNATURES_FILE).write_text("{")
    (written / "gpus.yaml").write_bytes(builtin_bundle().tables["gpus.yaml"])
    with pytest.raises(BundleError, match="not JSON"):
        read_bundle_path(written)


@settings(max_examples=30, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.dictionaries(
        st.from_regex(r"[a-z][a-z0-9.-]{0,20}", fullmatch=True),
        st.binary(max_size=512),
        max_size=6,
    ),
    st.booleans(),
)
def test_any_files_round_trip_through_an_archive(files: dict[str, bytes], compress: bool) -> None:
    from cudasched.knowledge.bundlefiles import _unpacked

    assert _unpacked(archive_bytes(files, compress=compress), "test") == files


def test_an_archive_that_unpacks_past_the_limit_is_refused(tmp_path: Path) -> None:
    import gzip

    from cudasched.knowledge import bundlefiles

    bomb = gzip.compress(b"\0" * (bundlefiles.ARCHIVE_LIMITS.max_bytes + 1))
    (tmp_path / "bomb.tgz").write_bytes(bomb)
    assert len(bomb) < 1024 * 1024
    with pytest.raises(BundleError, match="larger than"):
        read_bundle_path(tmp_path / "bomb.tgz")
    (tmp_path / "cut.tgz").write_bytes(gzip.compress(b"x" * 4096)[:-12])
    with pytest.raises(BundleError, match="truncated"):
        read_bundle_path(tmp_path / "cut.tgz")
