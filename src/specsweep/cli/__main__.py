"""`python -m specsweep.cli`, as the `specsweep` script."""
import sys

from specsweep.cli import main

sys.exit(main())
