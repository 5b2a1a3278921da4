"""``python -m workers run|export-state ...``: the data plane without Django."""

import sys

from workers.cli import main

sys.exit(main())
