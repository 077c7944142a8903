"""A real Kubernetes control plane on loopback: etcd, kube-apiserver, kube-scheduler and
kube-controller-manager, with TLS everywhere, ServiceAccount signing keys and the admission
plugins a kubeadm cluster runs (the defaults, NodeRestriction added: MutatingAdmissionWebhook,
ValidatingAdmissionPolicy and the rest are on by default in 1.35).

No kubelet runs: nodes are API objects (:mod:`tests.harness.fleet`) kept Ready by
:mod:`tests.harness.nodekeeper`; the scheduler binds pods to them and nothing starts the pods.

The control plane itself is :class:`tests.harness.controlplane.plane.ControlPlane`; its
processes (each in its own process group, so nothing outlives a test session) are started and
stopped by :mod:`tests.harness.controlplane.processes`, and what a running one records in its
directory (with the helpers a person starts beside it, ``controlplane webhook``) is
:mod:`tests.harness.controlplane.state`. ``python -m tests.harness.controlplane`` starts one
for a person.
"""
