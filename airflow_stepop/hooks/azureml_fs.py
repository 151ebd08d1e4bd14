"""``az://`` for ObjectStoragePath: the filesystem and credentials ``abfs://`` has.

adlfs serves ``abfs``, ``abfss`` and ``az`` alike, but the Azure provider registers only
``abfs``, ``abfss`` and ``adl`` with Airflow, so ``ObjectStoragePath("az://...")`` would find no
filesystem. Registered through ``get_provider_info()["filesystems"]``, ``az://`` gets the
provider's own ``get_fs``: a connection named in the URL (``az://<conn_id>@<container>/...``),
else adlfs's ambient credentials (``AZURE_STORAGE_CONNECTION_STRING``, account name and key,
``DefaultAzureCredential``).
"""

from __future__ import annotations

from typing import Any

schemes = ["az"]


def get_fs(conn_id: str | None, storage_options: dict[str, Any] | None = None) -> Any:
    from airflow.providers.microsoft.azure.fs.adls import get_fs as adls_fs

    return adls_fs(conn_id, storage_options)
