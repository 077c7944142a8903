"""cudasched's end-to-end harness (development only): a real Kubernetes control plane
(etcd, kube-apiserver, kube-scheduler, kube-controller-manager built from source at the
versions ``tests/e2e/go.mod`` pins) on loopback, fake GPU nodes from real GPU Feature Discovery
label sets, the CRDs cudasched reads, and the helpers the end-to-end tests and benchmarks share.

It lives with the tests, not in ``src/``: the wheel and the image ship ``cudasched`` alone
(``tests/test_packaging.py``). ``python -m tests.harness.controlplane up``, run from the
repository root, starts a control plane for a person. The product package ``cudasched`` never
imports this one; this one drives cudasched through its command line.
"""

from __future__ import annotations

__all__: list[str] = []
