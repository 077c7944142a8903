"""What admission remembers, each bounded in bytes: the decision memo (``decisions``), the
byte-bounded caches of compiled terms and merged affinities (``bounded``), and the frequency
sketch both admit entries by (``frequency``). No knowledge of Kubernetes or of admission's
rules: keys and values in, hits and evictions out."""
