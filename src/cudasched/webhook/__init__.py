"""The admission webhook: configuration, pure admission decisions, the cluster snapshot, the
watch cache, TLS and the HTTPS server.

Submodules are imported explicitly (``from cudasched.webhook.serving import serve_in_thread``);
this package imports nothing on its own so that the pure parts stay cheap to import.
"""
