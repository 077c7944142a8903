"""Kubernetes API access shared by the webhook, the node agent and the cluster readers.

One idea per module: ``client`` builds the API client from a kubeconfig or the in-cluster
service account, ``kinds`` declares the resource kinds cudasched reads, ``reflector`` mirrors
one kind with list+watch, ``events`` records Kubernetes Events. Objects are plain ``dict``s as
the API returns them; nothing here knows about admission or labels.
"""
