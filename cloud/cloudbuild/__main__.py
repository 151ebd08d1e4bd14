"""``python -m cloud.cloudbuild``: the fake on its own (:func:`cloud.cloudbuild.server.main`)."""

from cloud.cloudbuild.server import main

main()
