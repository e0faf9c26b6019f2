"""``python -m bench``: see :mod:`bench.run`."""

import sys

from .run import main

sys.exit(main())
