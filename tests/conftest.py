"""Shared pytest set-up, kept minimal.

Hypothesis deadlines are timing assertions in disguise and flake on a busy 2-core runner, so
they are off for the whole suite; each property test picks a modest ``max_examples`` itself.
"""

from __future__ import annotations

from hypothesis import settings

settings.register_profile("cudasched", deadline=None)
settings.load_profile("cudasched")
