"""What ``cudasched manifests`` prints to install cudasched in a cluster: pure builders of the
Kubernetes objects for the admission webhook (``install.webhook``) and the node agent
(``install.agent``), each choice explained where it is made."""
