"""The registry edge: an image's own config read from its registry (OCI distribution API),
credentials, a bounded cache, and the webhook's background resolver. Resolution itself stays
pure: it reads what this edge found through :class:`cudasched.knowledge.imageconfig.ConfigSource`.
"""
