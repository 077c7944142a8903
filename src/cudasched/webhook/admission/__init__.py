"""The admission decision, pure: bytes of an AdmissionReview and a cluster snapshot in, the
answer's bytes out, no clock, no network of its own (so the server, ``cudasched mutate`` and
the tests run the same code; what it must read, a claim's pod, it asks a source it is given).
``admitter`` stages it for the server; the rules for pods (``podrules``, and ``drapods`` for
GPU pods asked through a DRA device class), ResourceClaims made for pods (``claimrules``),
services (``servicerules``) and workload controllers' templates (``templaterules``) share
``steps`` and the placer (``placer``); around them the envelope (``review``), the object under
review (``reviewed``), JSON patches (``patch``), work limits (``limits``), the
unknown-requirement answer (``unknown``), warnings said once (``once``) and answers remembered
per template (``recall``)."""
