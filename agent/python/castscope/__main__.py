"""`python -m castscope`: the `castscope` command line."""
import sys

from castscope.cli import main

sys.exit(main())
