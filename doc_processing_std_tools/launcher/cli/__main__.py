"""``python -m doc_processing_std_tools.launcher.cli``: the same as ``dpt-launch``."""

import sys

from .main import main

sys.exit(main())
