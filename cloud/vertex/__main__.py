"""``python -m cloud.vertex``: the fake on its own (see :func:`cloud.vertex.server.main`)."""

from cloud.vertex.server import main

main()
