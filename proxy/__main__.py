"""``python -m proxy``: the ``prefixgate`` command line, for environments without the console script."""

from proxy.commands.cli import main

raise SystemExit(main())
