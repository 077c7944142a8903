"""One log line per decision at debug level (issue 27 item 13): what a person following a live
cluster's admissions (``controlplane webhook --log-level debug``) reads. Before, the webhook
logged nothing for a decision that went well."""

from __future__ import annotations

import logging

import pytest

from cudasched.knowledge import KnowledgeBase
from cudasched.settings.config import WebhookConfig
from cudasched.webhook.admission.admitter import Admitter
from cudasched.webhook.admission.review import creation_review
from tests.support import builders
from tests.support.admission import ask, nodes_state

LOGGER = "cudasched.webhook.admission.admitter"


def _decide(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    kb = KnowledgeBase.load()
    state = nodes_state(kb)
    adm = Admitter.from_config(WebhookConfig.from_mapping({"onNoFit": "deny"}), kb=kb)
    fits = builders.pod("fits", "ml", annotations={"cudasched.io/cuda-version": "12.4"})
    nowhere = builders.pod("nowhere", "ml", annotations={"cudasched.io/cuda-version": "13.0"})
    with caplog.at_level(level, logger=LOGGER):
        ask(adm, "pod", creation_review(fits, uid="uid-fits"), state)
        ask(adm, "pod", creation_review(nowhere, uid="uid-nowhere"), state)
    return [r.getMessage() for r in caplog.records if r.name == LOGGER]


def test_each_decision_is_one_line_at_debug(caplog: pytest.LogCaptureFixture) -> None:
    lines = _decide(caplog, logging.DEBUG)
    assert len(lines) == 2
    fits, nowhere = lines
    assert fits.startswith("decided CREATE Pod ml/fits uid=uid-fits: patched (constrained)")
    assert "requirement cuda>=12.4" in fits
    assert nowhere.startswith(
        "decided CREATE Pod ml/nowhere uid=uid-nowhere: denied (no node fits)"
    )


def test_nothing_is_logged_above_debug(caplog: pytest.LogCaptureFixture) -> None:
    assert _decide(caplog, logging.INFO) == []
