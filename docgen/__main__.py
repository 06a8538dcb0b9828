"""``python -m docgen``: rewrite or check the generated blocks of docs/."""

import sys

from docgen.generate import main

sys.exit(main())
