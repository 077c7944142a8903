"""The HTML report: one self-contained file an operator can open anywhere, including on an
air-gapped bastion host.

Self-contained means: inline CSS and a few lines of inline JavaScript, no fonts, scripts,
stylesheets or images from anywhere else, and a Content-Security-Policy that forbids the browser
to fetch any (``default-src 'none'``), so a value that slipped through could still not load
anything. Every value that comes from the cluster (names, labels, messages built from them) is
HTML-escaped, attributes included; nothing from the cluster reaches the script.

The renderer is pure: it takes computed data (matrix, pools, audit report) and returns text.
"""

from __future__ import annotations

from collections.abc import Iterable
from html import escape
from typing import TYPE_CHECKING

from cudasched.operations.audit.findings import Severity
from cudasched.operations.report.matrix import CellStatus

if TYPE_CHECKING:
    from cudasched.operations.audit.findings import AuditReport, Finding
    from cudasched.operations.pools import Pool
    from cudasched.operations.report.matrix import Cell, Matrix

__all__ = ["CSP", "render_findings", "render_report"]

#: The page's Content-Security-Policy: nothing may be fetched, inline style and script only.
CSP = "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; base-uri 'none'"

_CSS = """
:root { --ok:#1f7a3a; --ok-bg:#d8f3df; --warn:#8a5a00; --warn-bg:#fff0c2; --bad:#a4262c;
  --bad-bg:#fbdcdc; --na:#555; --na-bg:#eceff1; --line:#d0d7de; --ink:#1f2328; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--ink);
  margin: 0; padding: 24px 32px; background: #fff; }
h1 { font-size: 22px; margin: 0 0 4px; }
h2 { font-size: 17px; margin: 28px 0 8px; border-bottom: 1px solid var(--line);
  padding-bottom: 4px; }
p.meta { color: #57606a; margin: 0 0 12px; }
.badges span { display: inline-block; padding: 3px 10px; border-radius: 12px; margin-right: 6px;
  font-weight: 600; }
table { border-collapse: collapse; }
th, td { border: 1px solid var(--line); padding: 4px 8px; vertical-align: top; text-align: left; }
thead th { background: #f6f8fa; position: sticky; top: 0; }
.matrix-wrap { overflow: auto; max-width: 100%; }
table.matrix td { text-align: center; white-space: nowrap; font-size: 12px; cursor: help;
  vertical-align: middle; }
table.matrix th.pool { font-weight: 500; font-size: 12px; }
table.matrix th.runtime { font-size: 12px; vertical-align: bottom; }
table.matrix th.runtime > div { writing-mode: vertical-rl; transform: rotate(180deg);
  white-space: nowrap; margin: 0 auto; }
.w { white-space: nowrap; }
.req { display: block; font-weight: 400; color: #57606a; font-size: 12px; }
.compatible { background: var(--ok-bg); color: var(--ok); }
.compatible-with-caveats, .mixed { background: var(--warn-bg); color: var(--warn); }
.incompatible { background: var(--bad-bg); color: var(--bad); }
.no-requirement, .not-nvidia, .unreadable { background: var(--na-bg); color: var(--na); }
.unknown { background: var(--warn-bg); color: var(--warn); font-style: italic; }
.count { background: #eef1f8; }
.sev-error { background: var(--bad-bg); color: var(--bad); }
.sev-warning { background: var(--warn-bg); color: var(--warn); }
.sev-info { background: var(--na-bg); color: var(--na); }
.legend span { display: inline-block; padding: 2px 8px; margin: 4px 6px 0 0; border-radius: 4px;
  font-size: 12px; }
.filters button { font: inherit; margin-right: 4px; padding: 2px 10px;
  border: 1px solid var(--line); background: #f6f8fa; border-radius: 4px; cursor: pointer; }
.filters button.on { background: var(--ink); color: #fff; }
td.fix { color: #57606a; }
.muted { color: #57606a; }
code { font-family: ui-monospace, SFMono-Regular, Menlo, monospace; font-size: 12px; }
"""

_JS = """
// The filter buttons do nothing without this script, so they are shown by it.
document.querySelectorAll('p.filters').forEach(function (p) { p.hidden = false; });
document.querySelectorAll('button[data-filter]').forEach(function (button) {
  button.addEventListener('click', function () {
    var wanted = button.getAttribute('data-filter');
    document.querySelectorAll('tr[data-severity]').forEach(function (row) {
      row.hidden = wanted !== 'all' && row.getAttribute('data-severity') !== wanted;
    });
    document.querySelectorAll('button[data-filter]').forEach(function (other) {
      other.classList.toggle('on', other === button);
    });
  });
});
"""


def _e(value: object) -> str:
    return escape(str(value), quote=True)


def _page(title: str, body: Iterable[str]) -> str:
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en">',
            "<head>",
            '<meta charset="utf-8">',
            f'<meta http-equiv="Content-Security-Policy" content="{_e(CSP)}">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            f"<title>{_e(title)}</title>",
            f"<style>{_CSS}</style>",
            "</head>",
            "<body>",
            *body,
            f"<script>{_JS}</script>",
            "</body>",
            "</html>",
            "",
        ]
    )


def _header(title: str, source: str, generated: str, policy: str, knowledge: str = "") -> list[str]:
    judged = f' · judged with <span id="knowledge">{_e(knowledge)}</span>' if knowledge else ""
    return [
        f"<h1>{_e(title)}</h1>",
        f'<p class="meta">cluster: <code>{_e(source)}</code> · generated {_e(generated)} · '
        f"default policy <code>{_e(policy)}</code>{judged}</p>",
    ]


def _badges(report: AuditReport, extra: Iterable[str] = ()) -> str:
    counts = report.summary()
    parts = [f'<span class="count">{_e(text)}</span>' for text in extra]
    parts += [f'<span class="sev-{s.value}">{counts[s.value]} {s.value}</span>' for s in Severity]
    return f'<p class="badges" id="summary">{"".join(parts)}</p>'


def _cell(cell: Cell, row: str, pool: Pool) -> str:
    title = cell.status.value
    if cell.codes:
        title += " (" + ", ".join(cell.codes) + ")"
    if cell.detail:
        title += "\n" + cell.detail
    return (
        f'<td class="{_e(cell.status.value)}" data-runtime="{_e(row)}" data-pool="{_e(pool.name)}" '
        f'title="{_e(title)}">{_e(cell.headline)}</td>'
    )


def _requirement_text(matrix: Matrix, index: int) -> str:
    row = matrix.rows[index]
    req = row.requirement
    if req is None:
        return "unreadable"
    if row.unknown is not None:
        return f"CUDA unknown: {row.unknown.describe()}"
    if req.is_empty:
        return "not NVIDIA" if row.not_nvidia else "no CUDA requirement"
    return req.describe() + (f" ({req.source})" if req.source else "")


def _words(text: str) -> str:
    """``text`` escaped, each word unbreakable: a line may end between words, never inside a
    name (browsers break after a hyphen, a slash or, with ``overflow-wrap``, anywhere)."""
    return " ".join(f'<span class="w">{_e(word)}</span>' for word in text.split())


def _runtime_header(matrix: Matrix, index: int) -> str:
    """A runtime's column head, set vertically so that columns are as narrow as their cells:
    its kind (and namespace), its name and the CUDA it needs; the full requirement and where it
    comes from in the title."""
    row = matrix.rows[index]
    kind, _, name = row.ref.rpartition("/")
    disabled = " (disabled)" if row.disabled else ""
    req = row.requirement
    short = _requirement_text(matrix, index)
    if row.unknown is not None:
        short = "CUDA unknown"
    elif req is not None and not req.is_empty:
        short = req.describe()
    return (
        f'<th scope="col" class="runtime" data-runtime="{_e(row.ref)}" '
        f'title="{_e(row.ref)}: {_e(_requirement_text(matrix, index))}"><div>'
        f'<span class="muted">{_e(kind)}</span><br><b>{_e(name)}</b>{_e(disabled)}<br>'
        f'<span class="muted">{_e(short)}</span></div></th>'
    )


def _matrix(matrix: Matrix) -> list[str]:
    """Node pools down, serving runtimes across: a fleet grows by pools, so they take the
    rows, and the runtimes' heads are set vertically, so the sample's 13 pools and 8 runtimes
    fit a 1400-pixel window with no name cut (tests/cli/test_audit_report.py measures it in
    Chromium)."""
    if not matrix.rows or not matrix.pools:
        what = "serving runtimes" if not matrix.rows else "GPU nodes"
        return [f'<p class="muted" id="matrix-empty">The cluster has no {what}.</p>']
    head = ['<th scope="col">node pool \\ serving runtime</th>']
    head += [_runtime_header(matrix, index) for index in range(len(matrix.rows))]
    lines = [
        '<div class="matrix-wrap"><table class="matrix" id="matrix">',
        f"<thead><tr>{''.join(head)}</tr></thead>",
        "<tbody>",
    ]
    for column, pool in enumerate(matrix.pools):
        nodes = f"{len(pool.nodes)} node{'s' if len(pool.nodes) != 1 else ''}"
        driver = str(pool.driver) if pool.driver is not None else "driver unknown"
        facts = f"{pool.product or 'unknown GPU'}, {driver}, {pool.os_image or pool.os_text}"
        label = (
            f'<th scope="row" class="pool" data-pool="{_e(pool.name)}" '
            f'title="{_e(pool.describe())}"><span class="w">{_e(pool.name)}</span>'
            f'<span class="req">{_words(facts)}; {_words(nodes)}</span></th>'
        )
        cells = (
            _cell(matrix.cells[index][column], row.ref, pool)
            for index, row in enumerate(matrix.rows)
        )
        lines.append("<tr>" + label + "".join(cells) + "</tr>")
    lines += ["</tbody></table></div>", _legend()]
    return lines


def _legend() -> str:
    words = {
        CellStatus.COMPATIBLE: "compatible (native)",
        CellStatus.CAVEATS: "compatible with caveats (minor-version or forward compatibility)",
        CellStatus.INCOMPATIBLE: "incompatible",
        CellStatus.MIXED: "mixed (the pool's nodes disagree)",
        CellStatus.UNKNOWN: "GPU runtime of unknown CUDA: not protected",
        CellStatus.NO_REQUIREMENT: "no CUDA requirement (not a GPU runtime)",
        CellStatus.NOT_NVIDIA: "not an NVIDIA runtime",
    }
    spans = "".join(f'<span class="{s.value}">{_e(t)}</span>' for s, t in words.items())
    return f'<p class="legend">{spans} · hover a cell for its reason codes</p>'


def _pools(pools: tuple[Pool, ...]) -> list[str]:
    if not pools:
        return ['<p class="muted">The cluster has no GPU nodes.</p>']
    lines = [
        '<table id="pools"><thead><tr><th>pool</th><th>GPU</th><th>driver</th><th>OS</th>'
        "<th>driver installed by</th>"
        "<th>CUDA ceiling (native)</th><th>with minor-version compatibility</th><th>nodes</th>"
        "</tr></thead><tbody>"
    ]
    for pool in pools:
        native = pool.ceiling.native
        compat = pool.ceiling.minor_compat
        lines.append(
            f'<tr data-pool="{_e(pool.name)}"><td>{_e(pool.name)}</td>'
            f"<td>{_e(pool.product or 'unknown')}</td>"
            f"<td>{_e(pool.driver if pool.driver is not None else 'unknown')}</td>"
            f"<td>{_e(pool.os_image or pool.os_text)}</td>"
            f"<td>{_e(pool.manager.describe())}</td>"
            f"<td>{_e(native if native is not None else 'none')}</td>"
            f"<td>{_e(compat if compat is not None else 'none')}</td>"
            f"<td>{len(pool.nodes)}: {_e(', '.join(pool.nodes))}</td></tr>"
        )
    lines.append("</tbody></table>")
    return lines


_ON = ' class="on"'


def _finding_row(finding: Finding) -> str:
    sev = finding.severity.value
    return (
        f'<tr data-severity="{_e(sev)}" data-code="{_e(finding.code)}">'
        f'<td class="sev-{_e(sev)}">{_e(sev)}</td><td><code>{_e(finding.code)}</code></td>'
        f"<td>{_e(finding.object)}</td><td>{_e(finding.message)}</td>"
        f'<td class="fix">{_e(finding.fix or "")}</td></tr>'
    )


def _findings(report: AuditReport) -> list[str]:
    if not report.findings:
        return ['<p id="findings-empty">No findings: every check passed.</p>']
    buttons = "".join(
        f'<button type="button" data-filter="{value}"{_ON if value == "all" else ""}>'
        f"{value}</button>"
        for value in ("all", *(s.value for s in Severity))
    )
    return [
        f'<p class="filters" hidden>show: {buttons}</p>',
        '<table id="findings"><thead><tr><th>severity</th><th>code</th><th>object</th>'
        "<th>message</th><th>fix</th></tr></thead><tbody>",
        *(_finding_row(f) for f in report.findings),
        "</tbody></table>",
    ]


def render_report(
    matrix: Matrix,
    report: AuditReport,
    *,
    source: str,
    generated: str,
    title: str = "cudasched cluster report",
    knowledge: str = "",
) -> str:
    """The full report: the compatibility matrix, the node pools with their CUDA ceilings, and
    the audit findings; ``knowledge`` says which knowledge judged it (its version and age)."""
    body = [
        *_header(title, source, generated, matrix.policy.value, knowledge),
        _badges(
            report,
            (f"{len(matrix.pools)} GPU node pools", f"{len(matrix.rows)} serving runtimes"),
        ),
        "<h2>Compatibility matrix: serving runtimes × node pools</h2>",
        *_matrix(matrix),
        "<h2>Node pools and their CUDA ceiling</h2>",
        '<p class="muted">A pool is the GPU nodes with the same GPU product, driver version and '
        "OS. The ceiling is the newest CUDA release a workload can use on every node of the pool"
        " natively, and with minor-version compatibility (same CUDA major, no PTX JIT).</p>",
        *_pools(matrix.pools),
        "<h2>Audit findings</h2>",
        *_findings(report),
    ]
    return _page(title, body)


def render_findings(
    report: AuditReport,
    *,
    source: str,
    generated: str,
    policy: str,
    title: str = "cudasched audit",
) -> str:
    """The audit findings alone (``cudasched audit -o html``)."""
    body = [
        *_header(title, source, generated, policy),
        _badges(report),
        "<h2>Audit findings</h2>",
        *_findings(report),
    ]
    return _page(title, body)
