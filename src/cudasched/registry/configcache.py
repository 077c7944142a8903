"""Image configs remembered: by digest for good (content-addressed, it cannot change), by
tag for a while (``latest`` moves), failures briefly; bounded in bytes, oldest use evicted
first. Thread-safe (the webhook's resolver writes from its workers, reviews read)."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable

from cudasched.knowledge.imageconfig import ImageConfig
from cudasched.vocab.errors import InputError

__all__ = ["ConfigCache"]


class ConfigCache:
    """``(image, platform)`` -> config. An image named by digest is kept ``digest_ttl``
    seconds (for good by default: only the byte bound evicts it; the webhook sets a TTL when
    the cluster keeps image facts, so a person's override is seen); one named by tag is kept
    ``tag_ttl`` seconds; a failure ``error_ttl`` seconds (so an outage is not asked again by
    every review, and is asked again soon)."""

    def __init__(
        self,
        max_bytes: int = 8 * 1024 * 1024,
        *,
        tag_ttl: float = 300.0,
        error_ttl: float = 30.0,
        digest_ttl: float = float("inf"),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_bytes < 0 or tag_ttl <= 0 or error_ttl <= 0 or digest_ttl <= 0:
            raise InputError(
                "invalid image config cache: max_bytes must be >= 0 and the TTLs > 0 "
                f"(got {max_bytes}, {tag_ttl}, {error_ttl})"
            )
        self.max_bytes = max_bytes
        self.tag_ttl = tag_ttl
        self.error_ttl = error_ttl
        self.digest_ttl = digest_ttl
        self._clock = clock
        self._entries: OrderedDict[tuple[str, str], tuple[ImageConfig, float, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, image: str, platform: str) -> ImageConfig | None:
        """The remembered config (or failure), or ``None`` when none is fresh."""
        key = (image, platform)
        with self._lock:
            found = self._entries.get(key)
            if found is None:
                return None
            config, expires, size = found
            if expires <= self._clock():
                del self._entries[key]
                self._bytes -= size
                return None
            self._entries.move_to_end(key)
            return config

    def put(self, image: str, platform: str, config: ImageConfig) -> None:
        size = config.size()
        if size > self.max_bytes:
            return
        if not config.ok:
            life = self.error_ttl
        elif "@" in image:
            life = self.digest_ttl
        else:
            life = self.tag_ttl
        key = (image, platform)
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._bytes -= old[2]
            self._entries[key] = (config, self._clock() + life, size)
            self._bytes += size
            while self._bytes > self.max_bytes and self._entries:
                _, (_, _, dropped) = self._entries.popitem(last=False)
                self._bytes -= dropped
