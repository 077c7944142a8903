"""An image reference split the way container runtimes split it:
``[host[:port]/]path[:tag][@digest]``, the first path component a registry host when it contains
``.`` or ``:`` or is ``localhost``; anything else is refused with what was expected.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from cudasched.vocab.errors import InputError

__all__ = [
    "ImageRef",
    "parse_image_ref",
]

_DIGEST_RE = re.compile(r"^[A-Za-z][A-Za-z0-9]*(?:[+._-][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}$")
_TAG_RE = re.compile(r"^[\w][\w.-]{0,127}$")
_PATH_RE = re.compile(
    r"^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*$"
)


@dataclass(frozen=True, slots=True)
class ImageRef:
    """A parsed image reference. ``host`` is ``None`` for Docker Hub short names."""

    host: str | None
    path: str
    tag: str | None
    digest: str | None

    @property
    def repository(self) -> str:
        return f"{self.host}/{self.path}" if self.host else self.path


def parse_image_ref(image: str) -> ImageRef:
    """Split ``[host[:port]/]path[:tag][@digest]`` the way container runtimes do: the first
    path component is a registry host when it contains ``.`` or ``:`` or is ``localhost``."""
    if not isinstance(image, str) or not image.strip():
        raise InputError(f"invalid image {image!r}: expected a container image reference")
    text = image.strip()
    digest = None
    if "@" in text:
        text, digest = text.split("@", 1)
        if not _DIGEST_RE.match(digest):
            raise InputError(
                f"invalid image {image!r}: expected a digest such as @sha256:<64 hex digits>"
            )
    tag = None
    slash = text.rfind("/")
    colon = text.rfind(":")
    if colon > slash:
        text, tag = text[:colon], text[colon + 1 :]
        if not _TAG_RE.match(tag):
            raise InputError(f"invalid image {image!r}: the tag {tag!r} is not a valid tag")
    host = None
    first, _, rest = text.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        host, text = first.lower(), rest
    if not text or not _PATH_RE.match(text):
        raise InputError(
            f"invalid image {image!r}: expected lowercase repository path components "
            "such as nvcr.io/nvidia/tritonserver"
        )
    return ImageRef(host=host, path=text, tag=tag, digest=digest)
