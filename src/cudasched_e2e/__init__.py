"""cudasched's end-to-end harness (development only): a real Kubernetes control plane
(etcd, kube-apiserver, kube-scheduler, kube-controller-manager built from source at pinned
versions) on loopback, fake GPU nodes from real GPU Feature Discovery label sets, the CRDs
cudasched reads, and the helpers the end-to-end tests and benchmarks share.

``python -m cudasched_e2e.controlplane up`` starts one for a person. The product package
``cudasched`` never imports this one; this one drives cudasched through its command line.
"""

from __future__ import annotations

__all__: list[str] = []
