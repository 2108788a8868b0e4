"""``python -m compactor``: the compactor service (see :mod:`compactor.command`)."""

from compactor.command import main

raise SystemExit(main())
