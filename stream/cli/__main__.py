"""`python -m stream.cli`: the `facestream` command."""
import sys

from stream.cli.main import main

sys.exit(main())
