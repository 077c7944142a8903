"""The audit as wgpolicyk8s.io/v1alpha2 PolicyReports: every object validates against the CRD's
schema, every finding is one result in the report of its namespace (or the cluster's), and the
summaries count them."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import jsonschema
import yaml
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from cudasched.cli import app
from cudasched.operations.audit.findings import CODES, AuditReport, Finding
from cudasched.operations.audit.policyreport import REPORT_NAME, policy_reports

SCHEMA = yaml.safe_load(
    (Path(__file__).parents[1] / "data" / "policyreport" / "v1alpha2-schema.yaml").read_text(
        encoding="utf-8"
    )
)
WHEN = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def test_the_sample_audit_as_reports_validates_and_counts() -> None:
    as_of = ["--as-of", "2026-12-01"]  # lifecycle findings are judged on a date
    result = CliRunner().invoke(app, ["audit", "--sample", "-o", "policyreport", *as_of])
    assert result.exit_code == 1  # the sample has an error finding, whatever the format
    reports = [d for d in yaml.safe_load_all(result.stdout) if d]
    audited = CliRunner().invoke(app, ["audit", "--sample", "-o", "json", *as_of]).stdout
    audit = yaml.safe_load(audited)
    assert [(r["kind"], r["metadata"].get("namespace")) for r in reports] == [
        ("ClusterPolicyReport", None),
        ("PolicyReport", "team-nlp"),
        ("PolicyReport", "team-vision"),
    ]
    for report in reports:
        jsonschema.validate(report, SCHEMA)
        assert report["metadata"]["name"] == REPORT_NAME
        assert sum(report["summary"].values()) == len(report["results"])
    results = [r for report in reports for r in report["results"]]
    assert len(results) == len(audit["findings"]) == 18
    fails = [r for r in results if r["result"] == "fail"]
    assert [(r["rule"], r["resources"][0]["name"]) for r in fails] == [
        ("no-compatible-node", "nemotron-nano-fp4")
    ]
    assert fails[0]["resources"][0]["apiVersion"] == "serving.kserve.io/v1beta1"


_findings = st.lists(
    st.builds(
        Finding,
        code=st.sampled_from(sorted(CODES)),
        object=st.one_of(
            st.from_regex(r"Node/[a-z][a-z0-9-]{0,10}", fullmatch=True),
            st.from_regex(r"Pod/[a-z]{1,5}/[a-z][a-z0-9-]{0,10}", fullmatch=True),
        ),
        message=st.text(min_size=1, max_size=40),
        fix=st.one_of(st.none(), st.text(min_size=1, max_size=20)),
    ),
    max_size=20,
)


@given(_findings, st.lists(st.from_regex(r"[a-z]{1,5}", fullmatch=True), max_size=3))
def test_every_finding_is_one_result_in_its_namespace(
    findings: list[Finding], cleared: list[str]
) -> None:
    report = AuditReport.of(findings)
    reports = policy_reports(report, [], WHEN, namespaces=cleared)
    for doc in reports:
        jsonschema.validate(doc, SCHEMA)
        for result in doc["results"]:
            ref = result["resources"][0]
            assert ref.get("namespace") == doc["metadata"].get("namespace")
    assert sum(len(d["results"]) for d in reports) == len(report.findings)
    namespaces = {d["metadata"]["namespace"] for d in reports if d["kind"] == "PolicyReport"}
    assert set(cleared) <= namespaces


def test_info_stays_info_and_pools_are_named_by_their_nodes() -> None:
    """Issue 27 item 12: an information is no failed check (``pass``, or ``skip`` where
    cudasched could not judge the object), not a ``warn``; a pool's finding names the pool's
    Nodes, which exist, instead of ``kind: Pool``, which does not; every report carries the
    version of cudasched that wrote it."""
    from cudasched import __version__

    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-1", "uid": "u-1"}}
    findings = [
        Finding("labels-deprecated-only", "Node/gpu-1", "old keys", node="gpu-1"),
        Finding("requirement-unknown", "Pod/ml/x", "cuda unknown", fix="annotate it"),
        Finding(
            "driver-branch-ending",
            "Pool/t4-r550",
            "ends soon",
            node="gpu-1",
            nodes=("gpu-1", "gpu-2"),
        ),
        Finding("driver-branch-ended", "Pool/a100-r535", "ended", node="gpu-3", nodes=("gpu-3",)),
    ]
    reports = policy_reports(AuditReport.of(findings), [node], WHEN)
    for doc in reports:
        jsonschema.validate(doc, SCHEMA)
    assert {d["metadata"]["labels"]["app.kubernetes.io/version"] for d in reports} == {__version__}
    results = {
        (r["rule"], tuple(x["kind"] + "/" + x["name"] for x in r["resources"])): (
            r["result"],
            r.get("severity"),
            r["properties"]["severity"],
        )
        for d in reports
        for r in d["results"]
    }
    assert results == {
        ("labels-deprecated-only", ("Node/gpu-1",)): ("pass", None, "info"),
        ("requirement-unknown", ("Pod/x",)): ("skip", None, "info"),
        ("driver-branch-ending", ("Node/gpu-1", "Node/gpu-2")): ("pass", None, "info"),
        ("driver-branch-ended", ("Node/gpu-3",)): ("warn", "medium", "warning"),
    }
    cluster = reports[0]
    assert cluster["summary"] == {"pass": 2, "fail": 0, "warn": 1, "error": 0, "skip": 0}
    ending = next(r for r in cluster["results"] if r["rule"] == "driver-branch-ending")
    assert ending["resources"][0] == {
        "kind": "Node",
        "name": "gpu-1",
        "apiVersion": "v1",
        "uid": "u-1",
    }
    assert ending["properties"]["pool"] == "t4-r550"
