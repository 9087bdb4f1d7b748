"""MCP servers and child processes the tests spawn (``python PATH``, :data:`helpers.paths.SERVERS`)
or mount in-process (``module: helpers.servers.sample_servers:echo_server``)."""
