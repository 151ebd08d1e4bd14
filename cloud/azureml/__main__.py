"""``python -m cloud.azureml``: the fake on its own (see :func:`cloud.azureml.server.main`)."""

from cloud.azureml.server import main

main()
