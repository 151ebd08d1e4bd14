"""``az://`` for ObjectStoragePath: the filesystem and credentials ``abfs://`` has.

adlfs serves ``abfs``, ``abfss`` and ``az`` alike, but the Azure provider registers only
``abfs``, ``abfss`` and ``adl`` with Airflow, so ``ObjectStoragePath("az://...")`` would find no
filesystem. Registered through ``get_provider_info()["filesystems"]``, ``az://`` gets the
provider's own ``get_fs``: a connection named in the URL (``az://<conn_id>@<container>/...``),
else adlfs's ambient credentials (``AZURE_STORAGE_CONNECTION_STRING``, account name and key,
``DefaultAzureCredential``).
"""

from __future__ import annotations

import logging
from typing import Any

schemes = ["az"]
# azure-core logs each request's URL and headers at INFO: some twenty lines per blob call, which
# buried an Azure step's task log (140 of its 198 lines when it staged one step).
REQUEST_LOGGER = "azure.core.pipeline.policies.http_logging_policy"


def quiet_request_logs() -> None:
    """Log azure-core's request lines only at WARNING, unless a level was set for them."""
    logger = logging.getLogger(REQUEST_LOGGER)
    if logger.level == logging.NOTSET:
        logger.setLevel(logging.WARNING)


def get_fs(conn_id: str | None, storage_options: dict[str, Any] | None = None) -> Any:
    from airflow.providers.microsoft.azure.fs.adls import get_fs as adls_fs

    quiet_request_logs()
    return adls_fs(conn_id, storage_options)
