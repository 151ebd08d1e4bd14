"""``python -m cloud.gcs start --host H --port P --in-memory --signer-file F``."""

import sys

from cloud.gcs.routes import main

main(sys.argv[1:])
