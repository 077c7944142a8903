"""Fixtures shared by the operations tests."""

from __future__ import annotations

import pytest

from cudasched.knowledge import KnowledgeBase
from cudasched.knowledge.images import ImageTable


@pytest.fixture(scope="module")
def images(kb: KnowledgeBase) -> ImageTable:
    """The built-in image table (the one the commands use without --config)."""
    return ImageTable.builtin(kb)
