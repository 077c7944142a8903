"""The admission webhook, in rooms that import only downwards (the ``webhook`` contract in
``pyproject.toml``; ``docs/architecture.md`` draws it):

* ``server/``: the HTTPS server and the ASGI app, built from the configuration;
* ``background/``: the I/O that runs beside the requests (the watch cache, the NoCompatibleNode
  Events, the image resolver, the periodic audit);
* ``admission/``: the decision itself, pure (an AdmissionReview and a snapshot in, the answer's
  bytes out);
* ``state/``: the cluster snapshot the request path reads, and where it comes from;
* ``memo/``: what the decision remembers, bounded in bytes;
* ``metrics``: the process's counters, which every room above may count into.

The configuration the webhook serves by is :mod:`cudasched.settings.config`, shared with the
commands. Submodules are imported explicitly (``from cudasched.webhook.server.serving import
serve_in_thread``); no package here imports anything on its own, so the pure parts stay cheap
to import.
"""
