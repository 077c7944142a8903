"""What runs beside the requests, never on their path: the watch cache that publishes the
cluster snapshot (``watchcache``), the Events and gauge of objects no node can run (``nofit``)
and the Event on each of their pods once stored (``podevents``), the image resolver that reads
images' configs from their registries (``imageresolver``), the serving runtimes read for a
review when the cache has not seen them yet (``runtimereader``), the periodic audit
(``periodic``), and the knowledge bundle followed from a registry and swapped in between
reviews (``following``), its checks said in metrics and Events (``knowledgereport``).
The room that talks to Kubernetes and to registries."""
