"""Shared pytest set-up, kept minimal.

Hypothesis deadlines are timing assertions in disguise and flake on a busy 2-core runner, so
they are off for the whole suite; each property test picks a modest ``max_examples`` itself.
The knowledge base's parsed-data cache goes to a directory of this run (inherited by the
commands the tests start), never to the user's own cache.
"""

from __future__ import annotations

import os
import tempfile

import pytest
from hypothesis import settings

from cudasched.knowledge import KnowledgeBase

os.environ["CUDASCHED_CACHE_DIR"] = tempfile.mkdtemp(prefix="cudasched-test-cache-")

settings.register_profile("cudasched", deadline=None)
settings.load_profile("cudasched")


@pytest.fixture(scope="session")
def kb() -> KnowledgeBase:
    """The bundled knowledge base, loaded once for the whole run (it is immutable)."""
    return KnowledgeBase.load()
