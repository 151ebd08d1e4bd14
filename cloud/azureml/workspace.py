"""The Azure ML fake's workspace-level routes: the workspace, its discovery, datastores, computes.

These answer from settings alone (region, ``computes``, Azurite's connection string): any
subscription / resource group / workspace name exists, with the datastores of
:data:`cloud.azureml.state.DATASTORES` and the clusters of the ``computes`` setting.
"""

from __future__ import annotations

import re
import uuid
from typing import Any

from cloud.azureml.arm import PROVIDER, SEG, WS, ArmError, system_data, ws_id
from cloud.azureml.state import (
    AZURITE_ACCOUNT,
    DATASTORES,
    DEFAULT_DATASTORE,
    LOW_PRIORITY_PREFIX,
    AzureMLState,
)
from cloud.fake_http import Request, Response


class WorkspaceRoutes(AzureMLState):
    """``GET {WS}``, ``/discovery/workspaces/{ws}``, ``{WS}/datastores...``, ``/computes...``."""

    def _add_workspace_routes(self) -> None:
        r = self.router
        r.add("GET", WS, "Workspaces_Get", self.get_workspace)
        r.add("GET", rf"{WS}/datastores", "Datastores_List", self.list_datastores)
        r.add("GET", rf"{WS}/datastores/(?P<ds>{SEG})", "Datastores_Get", self.get_datastore)
        r.add(
            "POST",
            rf"{WS}/datastores/(?P<ds>{SEG})/listSecrets",
            "Datastores_ListSecrets",
            self.datastore_secrets,
        )
        r.add("GET", rf"{WS}/computes", "Compute_List", self.list_computes)
        r.add("GET", rf"{WS}/computes/(?P<compute>{SEG})", "Compute_Get", self.get_compute)
        r.add("GET", rf"/discovery/workspaces/(?P<ws>{SEG})", "Discovery", self.discovery)

    def get_workspace(self, req: Request) -> Response:
        m = req.match
        assert m is not None
        wid = ws_id(m)
        return Response(
            200,
            {
                "id": wid,
                "name": m["ws"],
                "type": f"{PROVIDER}/workspaces",
                "location": self.region,
                "kind": "Default",
                "identity": {"type": "SystemAssigned"},
                "sku": {"name": "Basic", "tier": "Basic"},
                "properties": {
                    "friendlyName": m["ws"],
                    "workspaceId": str(uuid.uuid5(uuid.NAMESPACE_URL, wid.lower())),
                    "discoveryUrl": f"{req.base_url}/discovery/workspaces/{m['ws']}",
                    "mlFlowTrackingUri": f"azureml://{self.region}.api.azureml.ms/mlflow/v1.0{wid}",
                    "storageAccount": f"/subscriptions/{m['sub']}/resourceGroups/{m['rg']}/"
                    f"providers/Microsoft.Storage/storageAccounts/{AZURITE_ACCOUNT}",
                    "provisioningState": "Succeeded",
                    "publicNetworkAccess": "Enabled",
                },
                "systemData": system_data(0),
            },
        )

    def discovery(self, req: Request) -> Response:
        """Every service of the workspace (run history, MLflow...) is this fake."""
        return Response(
            200,
            {
                "api": req.base_url,
                "catalog": req.base_url,
                "experimentation": req.base_url,
                "gallery": req.base_url,
                "history": req.base_url,
                "hyperdrive": req.base_url,
                "labeling": req.base_url,
                "modelmanagement": req.base_url,
                "pipelines": req.base_url,
                "studiometadata": req.base_url,
            },
        )

    # --- datastores ----------------------------------------------------------------------
    def _datastore(self, m: re.Match[str], name: str) -> dict[str, Any]:
        container = DATASTORES[name]
        return {
            "id": f"{ws_id(m)}/datastores/{name}",
            "name": name,
            "type": f"{PROVIDER}/workspaces/datastores",
            "properties": {
                "datastoreType": "AzureBlob",
                "accountName": AZURITE_ACCOUNT,
                "containerName": container,
                "endpoint": "core.windows.net",
                "protocol": "https",
                "isDefault": name == DEFAULT_DATASTORE,
                "credentials": {"credentialsType": "AccountKey"},
                "serviceDataAccessAuthIdentity": "WorkspaceSystemAssignedIdentity",
                "tags": {},
                "properties": {},
            },
            "systemData": system_data(0),
        }

    def list_datastores(self, req: Request) -> Response:
        m = req.match
        assert m is not None
        names = list(DATASTORES)
        if (req.arg("isDefault") or "").lower() == "true":
            names = [DEFAULT_DATASTORE]
        return Response(200, {"value": [self._datastore(m, n) for n in names]})

    def get_datastore(self, req: Request) -> Response:
        m = req.match
        assert m is not None
        if m["ds"] not in DATASTORES:
            raise ArmError(404, "UserError", f"Datastore '{m['ds']}' not found.", "NotFound")
        return Response(200, self._datastore(m, m["ds"]))

    def datastore_secrets(self, req: Request) -> Response:
        """Azurite's account key, from the connection string the fake was given."""
        m = req.match
        assert m is not None
        if m["ds"] not in DATASTORES:
            raise ArmError(404, "UserError", f"Datastore '{m['ds']}' not found.", "NotFound")
        key = ""
        for part in (self.conn_str or "").split(";"):
            if part.startswith("AccountKey="):
                key = part[len("AccountKey=") :]
        return Response(200, {"secretsType": "AccountKey", "key": key})

    # --- computes ------------------------------------------------------------------------
    def _compute(self, m: re.Match[str], name: str) -> dict[str, Any]:
        return {
            "id": f"{ws_id(m)}/computes/{name}",
            "name": name,
            "type": f"{PROVIDER}/workspaces/computes",
            "location": self.region,
            "properties": {
                "computeType": "AmlCompute",
                "computeLocation": self.region,
                "provisioningState": "Succeeded",
                "properties": {
                    "vmSize": self.computes[name],
                    "vmPriority": "LowPriority"
                    if name.startswith(LOW_PRIORITY_PREFIX)
                    else "Dedicated",
                    "scaleSettings": {"minNodeCount": 0, "maxNodeCount": 4},
                },
            },
        }

    def list_computes(self, req: Request) -> Response:
        m = req.match
        assert m is not None
        return Response(200, {"value": [self._compute(m, n) for n in self.computes]})

    def get_compute(self, req: Request) -> Response:
        m = req.match
        assert m is not None
        if m["compute"] not in self.computes:
            raise ArmError(404, "ResourceNotFound", f"Compute '{m['compute']}' was not found.")
        return Response(200, self._compute(m, m["compute"]))
