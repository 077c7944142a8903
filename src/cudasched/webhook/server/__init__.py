"""The server: the ASGI app (``app``) and the one seam it decides admission through, the app
assembled from the configuration (``assembly``), uvicorn with threads and worker processes
(``serving``), its HTTP/1.1 limits (``protocol``) and its certificates (``tls``). The only room
that speaks HTTP."""
