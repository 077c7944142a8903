"""Shared pytest set-up, kept minimal.

Hypothesis deadlines are timing assertions in disguise and flake on a busy 2-core runner, so
they are off for the whole suite; each property test picks a modest ``max_examples`` itself.
The knowledge base's parsed-data cache goes to a directory of this run (inherited by the
commands the tests start), never to the user's own cache. No cluster is configured for the run
(``$KUBECONFIG`` names a file that does not exist, no in-cluster variables), so a command given
no cluster judges the bundled sample whatever the machine's own ``~/.kube/config`` says; the
tests that need a kubeconfig write one and point at it.
"""

from __future__ import annotations

import os
import tempfile
from importlib import resources
from typing import Any

import pytest
import yaml
from hypothesis import settings

from cudasched.knowledge import DATA_FILES, KnowledgeBase

os.environ["CUDASCHED_CACHE_DIR"] = tempfile.mkdtemp(prefix="cudasched-test-cache-")
os.environ["KUBECONFIG"] = os.path.join(os.environ["CUDASCHED_CACHE_DIR"], "no-kubeconfig")
for _name in ("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"):
    os.environ.pop(_name, None)

settings.register_profile("cudasched", deadline=None)
settings.load_profile("cudasched")


@pytest.fixture(scope="session")
def kb() -> KnowledgeBase:
    """The bundled knowledge base, loaded once for the whole run (it is immutable)."""
    return KnowledgeBase.load()


@pytest.fixture(scope="module")
def raw_documents() -> dict[str, Any]:
    """The bundled data files as YAML reads them (file name -> document), once per test
    module. Tests that edit them edit a deep copy (``KnowledgeBase.from_documents`` builds a
    knowledge base from one)."""
    root = resources.files("cudasched").joinpath("data")
    return {name: yaml.safe_load(root.joinpath(name).read_text("utf-8")) for name in DATA_FILES}
