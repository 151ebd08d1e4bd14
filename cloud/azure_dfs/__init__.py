"""Azurite with what a Kubernetes step's pod needs of ADLS Gen2 and Azurite lacks.

Azurite has no hierarchical namespace and refuses directory SAS (``sr=d``: 403
AuthorizationFailure). ``front.py`` is an HTTP front before a private Azurite that

* checks a request carrying ``sr=d`` as ADLS Gen2 does: the signature recomputed by the
  official SDK (``generate_directory_sas``) from the request's own query parameters and the
  directory that the first ``sdd`` segments of its blob path name, compared in constant time;
  the expiry; the permissions (c or w for a PUT, nothing else allowed); then stores the blob in
  Azurite with the account key. A refusal is Azure's 403 XML;
* says ``x-ms-is-hns-enabled: true`` of the account (Get Account Information);
* forwards every other request to Azurite unchanged (Azurite checks ``sr=b`` SAS and shared-key
  requests itself).

:func:`serve` starts one with its own Azurite for a test module; ``make cloud-up`` runs one
before the stack's Azurite (``python -m cloud.azure_dfs``): ``STEPOP_ADLS_BLOB_ENDPOINT`` and
the connection ``adls_emulated`` (Azurite's account reached through the front).
"""

from cloud.azure_dfs.front import serve

__all__ = ["serve"]
