"""``python -m stager`` is the ``stager`` command."""
import sys

from stager.cli import main

sys.exit(main())
