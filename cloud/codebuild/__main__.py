"""``python -m cloud.codebuild``: the fake on its own (see :func:`cloud.codebuild.server.main`)."""

from cloud.codebuild.server import main

main()
