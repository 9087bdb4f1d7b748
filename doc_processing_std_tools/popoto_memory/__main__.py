"""``python -m doc_processing_std_tools.popoto_memory``: serve popoto-memory over stdio."""

from . import main

main()
