"""gcp-storage-emulator with what a Kubernetes step's pod needs of GCS and the emulator lacks.

* ``POST /<bucket>/``: an HTML form upload under a V4 POST policy (``forms.py``), as the pod's
  entry sends it with the upload grant the worker signed. The policy's signature is checked
  against the stack's throwaway service account (``signer.py``), and each condition, its
  expiry and the fields it does not name are enforced as GCS does.
* ``POST /token``: the OAuth token endpoint of that service account's key, so the worker's
  libraries (gcsfs, google-auth) can use the key as on Google Cloud.

Everything else is the emulator's own. ``python -m cloud.gcs start ... --signer-file F`` runs
it (the stack does, ``cloud.stack.commands``); :func:`server` runs one in a test.
"""

from cloud.gcs.routes import server

__all__ = ["server"]
