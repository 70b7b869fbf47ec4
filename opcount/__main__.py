"""``python -m opcount``: the same as the ``opcount`` command."""

from .cli import main

raise SystemExit(main())
