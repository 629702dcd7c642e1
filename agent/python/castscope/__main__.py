"""castscope command line (for now: `castscope policy check`)."""
import sys

from castscope.cli import main

sys.exit(main())
