"""``python -m cloud.stack up|down|env|status|serve`` (see :mod:`cloud.stack`)."""

import sys

from cloud.stack.commands import main

sys.exit(main())
