"""``operations.html``: one self-contained page, every cluster value escaped, and the DOM holds
every runtime, pool and finding (parsed with the standard library's HTML parser)."""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path
from typing import Any

from cudasched.cluster.fleet import Fleet
from cudasched.cluster.snapshot import ClusterSnapshot, bundled_snapshot, load_snapshot
from cudasched.knowledge import KnowledgeBase
from cudasched.knowledge.images import ImageTable
from cudasched.operations.audit import audit
from cudasched.operations.pools import node_pools
from cudasched.operations.report.html import CSP, render_findings, render_report
from cudasched.operations.report.matrix import compatibility_matrix
from cudasched.operations.runtimes import runtime_rows
from cudasched.vocab.requirements import Policy

DATA = Path(__file__).parents[1] / "data" / "audit"
EVIL = '"><script>alert(1)</script><img src=x onerror=alert(2)>'


class Page(HTMLParser):
    """Every start tag with its attributes, and all text."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []
        self.scripts: list[str] = []
        self.styles: list[str] = []
        self._in: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        self._in = tag if tag in ("script", "style") else None

    def handle_endtag(self, tag: str) -> None:
        self._in = None

    def handle_data(self, data: str) -> None:
        if self._in == "script":
            self.scripts.append(data)
        elif self._in == "style":
            self.styles.append(data)
        else:
            self.text.append(data)

    def attrs(self, name: str) -> list[str]:
        return [a[name] or "" for _, a in self.tags if name in a]


def parse(html: str) -> Page:
    page = Page()
    page.feed(html)
    page.close()
    return page


def build(snapshot: ClusterSnapshot, kb: KnowledgeBase) -> tuple[str, Any, Any]:
    fleet = Fleet.from_snapshot(snapshot, kb)
    images = ImageTable.builtin(kb)
    matrix = compatibility_matrix(
        runtime_rows(fleet, images), node_pools(snapshot, fleet), Policy.STRICT, kb
    )
    report = audit(snapshot, fleet, images)
    html = render_report(matrix, report, source=snapshot.source, generated="2026-12-01 00:00 UTC")
    return html, matrix, report


def assert_self_contained(page: Page) -> None:
    tags = [t for t, _ in page.tags]
    assert tags.count("script") == 1  # ours, inline
    assert all(not a.get("src") for t, a in page.tags if t == "script")
    assert "img" not in tags and "link" not in tags and "iframe" not in tags
    assert not page.attrs("src") and not page.attrs("href")
    assert not any(k.startswith("on") for _, a in page.tags for k in a)
    css = "".join(page.styles)
    assert "url(" not in css and "@import" not in css and "@font-face" not in css
    assert "fetch(" not in "".join(page.scripts) and "http" not in "".join(page.scripts)
    metas = [a for t, a in page.tags if t == "meta" and a.get("http-equiv")]
    assert metas == [{"http-equiv": "Content-Security-Policy", "content": CSP}]
    assert "default-src 'none'" in CSP


def test_sample_report_holds_every_runtime_pool_and_finding(kb: KnowledgeBase) -> None:
    html, matrix, report = build(bundled_snapshot(), kb)
    page = parse(html)
    assert_self_contained(page)
    runtimes = {a["data-runtime"] for t, a in page.tags if t == "th" and "data-runtime" in a}
    assert runtimes == {r.ref for r in matrix.rows}
    header_pools = {a["data-pool"] for t, a in page.tags if t == "th" and "data-pool" in a}
    assert header_pools == {p.name for p in matrix.pools}
    cells = [a for t, a in page.tags if t == "td" and "data-runtime" in a]
    assert len(cells) == len(matrix.rows) * len(matrix.pools)
    # Each cell's colour is its verdict and its title names the reason codes.
    first = matrix.cells[0][0]
    assert cells[0]["class"] == first.status.value
    assert all(code in (cells[0]["title"] or "") for code in first.codes)
    rows = [a for t, a in page.tags if t == "tr" and "data-severity" in a]
    assert [(a["data-severity"], a["data-code"]) for a in rows] == [
        (f.severity.value, f.code) for f in report.findings
    ]
    text = " ".join(page.text)
    for pool in matrix.pools:
        assert pool.name in text
        assert str(pool.ceiling.native) in text


def test_every_cluster_value_is_escaped(kb: KnowledgeBase) -> None:
    snapshot = load_snapshot(DATA / "pending.yaml")
    node = dict(snapshot.nodes[0])
    node["status"] = {**node["status"], "nodeInfo": {"osImage": EVIL}}
    node["metadata"] = {**node["metadata"], "labels": {**node["metadata"]["labels"]}}
    node["metadata"]["labels"]["cudasched.io/gpu.product"] = EVIL
    runtime = {
        "apiVersion": "serving.kserve.io/v1alpha1",
        "kind": "ClusterServingRuntime",
        "metadata": {"name": "evil", "annotations": {"cudasched.io/cuda-version": EVIL}},
        "spec": {"containers": [{"name": "kserve-container", "image": "x"}]},
    }
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "p",
            "namespace": "n",
            "annotations": {"cudasched.io/cuda-version": EVIL},
        },
        "spec": {"containers": [{"name": "c", "image": "x"}]},
        "status": {"phase": "Pending"},
    }
    snapshot = ClusterSnapshot(
        nodes=(node, *snapshot.nodes[1:]),
        cluster_serving_runtimes=(runtime,),
        pods=(pod,),
        source=EVIL,
    )
    html, _, report = build(snapshot, kb)
    assert any(EVIL in f.message for f in report.findings)
    assert EVIL not in html
    page = parse(html)
    assert_self_contained(page)
    text = "".join(page.text)
    assert EVIL in text  # shown to the reader as text, never as markup
    titles = page.attrs("title")
    assert any(EVIL in t for t in titles)  # and inside attributes, still one attribute


def test_findings_page(kb: KnowledgeBase) -> None:
    snapshot = load_snapshot(DATA / "labels.yaml")
    fleet = Fleet.from_snapshot(snapshot, kb)
    report = audit(snapshot, fleet, ImageTable.builtin(kb))
    html = render_findings(report, source="labels.yaml", generated="now", policy="strict")
    page = parse(html)
    assert_self_contained(page)
    assert len([a for t, a in page.tags if t == "tr" and "data-severity" in a]) == len(
        report.findings
    )
    assert "matrix" not in page.attrs("id")


def test_empty_cluster_says_so(kb: KnowledgeBase) -> None:
    html, _, _ = build(ClusterSnapshot(source="empty"), kb)
    page = parse(html)
    assert_self_contained(page)
    ids = page.attrs("id")
    assert "matrix-empty" in ids and "findings-empty" in ids
