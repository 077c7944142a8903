"""The cluster as the request path sees it: one immutable snapshot (``clusterstate``) that
admission reads without calling the API, and the source the server reads it from
(``source``: the watch cache in production, a fixed snapshot offline)."""
