"""`python -m specsweep.cli`, as the `specsweep` script."""
import sys

from . import main

sys.exit(main())
