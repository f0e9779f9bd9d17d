"""`python -m gptlineage ...` is the same as `gptlineage ...`."""

import sys

from gptlineage.cli import main

sys.exit(main())
