"""``python -m doc_processing_std_tools.filesystem [ROOT ...]``: serve over stdio."""

from . import main

main()
