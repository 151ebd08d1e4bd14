"""``python -m cloud.kubernetes``: the fake alone (see :func:`cloud.kubernetes.server.main`)."""

from cloud.kubernetes.server import main

main()
