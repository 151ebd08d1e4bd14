"""The Kubernetes backend: a step runs as a ``batch/v1`` Job on a cluster's (GPU) nodes.

Where each part lives: ``clients`` (the connection, read as the cncf provider reads it, and
API clients on configurations of their own), ``config`` (the operator's argument rules,
checked at parse), ``shapes`` (Kubernetes' naming and object rules), ``hardware``
(``ResourceSettings`` as requests, limits and a GPU-model node affinity), ``manifest`` (the
Job, its Secret and its headless Service), ``transfer`` (the signed URLs a pod with no cloud
SDK reads and writes the artifact store with) and ``entry`` (the pod's entry script, standard
library only).
"""
