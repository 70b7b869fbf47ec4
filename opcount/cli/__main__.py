"""``python -m opcount.cli``: the same as the ``opcount`` command."""

from .main import main

raise SystemExit(main())
