"""The one policy every tool call goes through, whatever its path.

- ``policy``: :class:`~.policy.CallPolicy`, one per exposed tool: admission (the server's
  state, the process lock and the fleet lock, the call's deadline, its lock wait included)
  and the end (its outcome, its metrics and span, the answer a failure gets). In-process tools
  (through fastmcp), popoto's plain calls, relayed stdio calls (the fast path, inline or in a
  task, and the SDK path), relayed URL calls and ``call_tool`` in search mode all use it; a
  rule added there holds on every path.
- ``failures``: :class:`~.failures.CallFailed`, a call the launcher answered with an error,
  with its typed :class:`~doc_processing_std_tools.telemetry.Outcome`.
- ``guards``: :class:`~.guards.CallGuards`, what a composition asks of every call beyond its
  tool's rules: ``audit`` (:class:`~.audit.AuditLog`, one JSON line per call, written before
  its answer; a subscription for in-process readers) and ``rate_limits``
  (:class:`~.rate_limits.RateLimits`, GCRA buckets in memory or on the fleet's Redis).
- ``policed_tools``: a fastmcp tool that runs through its policy, and the transform that wraps
  every tool a mounted server lists.
- ``pins`` and ``pin_gate``: the lock file of approved definitions, and the verdicts that keep
  a definition that is not the approved one out of every list and refuse its calls (the
  transform above applies them; the policy's ``withheld`` answers the call).

A layer of the launcher beneath ``external``: may import the package's ``locking``,
``telemetry``, ``seams`` and ``exceptions``, and ``config``; never another launcher folder.
"""
