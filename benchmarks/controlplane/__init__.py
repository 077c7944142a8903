"""What cudasched costs a real control plane: pod creation through kube-apiserver with the webhook
registered, and kube-scheduler's work on pods that carry cudasched's node affinity.

Both run against the harness's real etcd, kube-apiserver, kube-controller-manager and
kube-scheduler (:mod:`tests.harness.controlplane`, built from source at the pinned versions) on
loopback, with the webhook as ``cudasched webhook`` on the host, registered as
``cudasched manifests`` prints it (URL client config). Measured side by side in one run:

* **pod-create latency** (``create``): GPU pods (Triton 24.05: the webhook resolves CUDA 12.4
  and patches node affinity) POSTed one at a time, ``--pods`` with the webhook registered and
  ``--pods`` without, in alternating rounds so drift hits both; plus CPU pods with the webhook
  registered (its ``matchConditions`` keep them away from it). The scheduler is not running, so
  only admission and storage are timed. The anchor is Kyverno's published pod-create p99 of
  129-466 ms.
* **scheduler throughput** (``schedule``): for each fleet size (``--nodes``, default 1,000 and
  5,000 fake nodes from the sample's 21 GFD label sets), ``--scheduled`` pods are created while
  kube-scheduler is stopped, then it is started and its count of scheduled pods is polled
  from its metrics every 0.1 s.
  Four pod shapes: a plain ``nvidia.com/gpu`` pod; a predictor-like pod (Triton image, CPU and
  memory requests, KServe labels) without affinity; the same pod with the node affinity the
  webhook injects with its default ``labelScheme: auto`` (the sample fleet has a node without
  cudasched's labels, so auto compiles to GFD's keys: ``cuda >= 12.4, cc >= 6.0`` as ORed terms
  over major/minor); and with ``labelScheme: cudasched`` (one ``Gt`` on
  ``cudasched.io/cuda.code`` and one on the compute code); and, as the floor of restricting the
  pod to those nodes at all, one ``In`` on the harness's template label admitting exactly the
  nodes ``cudasched explain`` says can run it (a smaller feasible set makes the scheduler
  filter more nodes per pod whatever the selector). The injected affinities are taken from
  dry-run creates through the webhook. Per-pod latency is kube-scheduler's own
  ``scheduler_scheduling_algorithm_duration_seconds`` (filter + score) and its Filter
  extension point; what the selector's size costs is its NodeAffinity plugin alone: the mean
  Filter call on one node, times the nodes it filtered per pod, plus its PreFilter (the
  difference between the injected terms and the one ``In`` is the compiled selector's own
  cost). The anchor is scheduler_perf's ~220 pods/s with node affinity at 5,000 nodes.

Run ``python -m benchmarks.controlplane --help``; ``--quick`` is a small smoke run. The first run
builds the binaries (many minutes, once).

The modules: :mod:`.pods` (the pods measured and their shapes), :mod:`.create` (pod-create
latency), :mod:`.affinities` (the affinities compared), :mod:`.schedule` (the scheduler's
throughput), :mod:`.metrics` (kube-scheduler's Prometheus text read), :mod:`.match` (its
node-affinity matching timed in Go), :mod:`.report` (the tables and ratios) and
:mod:`.__main__` (the command).
"""
