"""The error of an Azure ML request refused before any API call.

Its own module because every piece that checks a request raises it (``config``, ``roots``,
``compute``, ``launch``), and they stand above one another.
"""

from __future__ import annotations


class AzureMLConfigError(ValueError):
    """A request Azure ML would refuse, caught before any API call."""
