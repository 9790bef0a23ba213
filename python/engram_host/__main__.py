"""``python -m engram_host``: see :mod:`engram_host.cli`."""
import sys

from .cli import main

sys.exit(main())
