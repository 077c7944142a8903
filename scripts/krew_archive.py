"""Build the krew archive of kubectl-cudasched, byte for byte the same on every machine.

    python3 scripts/krew_archive.py dist/kubectl-cudasched.tar.gz

prints the archive's SHA-256, which deploy/krew/cudasched.yaml must carry (the release job
uploads the archive where that manifest's uri points; tests/install/test_deploy.py rebuilds it
and compares). The archive holds deploy/krew/kubectl-cudasched, the launcher, at its root.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAUNCHER = ROOT / "deploy" / "krew" / "kubectl-cudasched"


def archive_bytes() -> bytes:
    """The .tar.gz: fixed owner, mode and times, so its hash depends on the launcher only."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        data = LAUNCHER.read_bytes()
        info = tarfile.TarInfo("kubectl-cudasched")
        info.size, info.mode, info.mtime = len(data), 0o755, 0
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        tar.addfile(info, io.BytesIO(data))
    packed = io.BytesIO()
    with gzip.GzipFile(fileobj=packed, mode="wb", mtime=0, filename="") as gz:
        gz.write(raw.getvalue())
    return packed.getvalue()


def main(argv: list[str]) -> int:
    data = archive_bytes()
    if len(argv) > 1:
        Path(argv[1]).parent.mkdir(parents=True, exist_ok=True)
        Path(argv[1]).write_bytes(data)
    print(hashlib.sha256(data).hexdigest())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
