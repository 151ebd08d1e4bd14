"""``python -m cloud.azure_dfs --host H --port P --azurite HOST:PORT``: the front before a running
Azurite (the stack's), until stopped."""

import argparse
import threading

from cloud.azure_dfs.front import front

parser = argparse.ArgumentParser(description=__doc__)
parser.add_argument("--host", default="127.0.0.1")
parser.add_argument("--port", type=int, required=True)
parser.add_argument("--azurite", required=True, help="host:port of Azurite's blob service")
options = parser.parse_args()
azurite_host, _, azurite_port = options.azurite.rpartition(":")
front(options.host, options.port, (azurite_host, int(azurite_port)))
threading.Event().wait()
