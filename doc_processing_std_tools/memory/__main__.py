"""``python -m doc_processing_std_tools.memory``: serve memory-tools over stdio."""

from . import main

main()
