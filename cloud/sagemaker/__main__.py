"""``python -m cloud.sagemaker``: the fake on its own (see :func:`cloud.sagemaker.server.main`)."""

from cloud.sagemaker.server import main

main()
