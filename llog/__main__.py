"""``python -m llog`` is the ``llog`` command."""

import sys

from llog.cli import main

sys.exit(main())
