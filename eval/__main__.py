"""`python -m eval ...` is the same as `reconscore ...`."""

import sys

from eval.cli import main

sys.exit(main())
