"""What the tests share: helper modules (imported as ``helpers.<module>``; pytest puts ``tests/``
on ``sys.path``, see ``pythonpath`` in pyproject.toml) and, in ``servers/``, the MCP servers and
child processes that tests spawn by path or mount with ``module: helpers.servers.<module>:<name>``.

No test module imports another test module: what two of them need lives here. Benchmarks
import these modules too, with ``tests/`` put on ``sys.path``.
"""
