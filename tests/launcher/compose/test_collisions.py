"""Two mounted servers offering one tool name: refused naming both, resolved by a namespace."""

from __future__ import annotations

from helpers.launch import run_main


def test_collision_is_refused_naming_both_servers(write_config, capsys) -> None:
    path = write_config(
        """\
        servers:
          first:
            module: helpers.servers.sample_servers:echo_server
          second:
            module: helpers.servers.sample_servers:echo_server
        """
    )
    status, _, err = run_main(["--config", str(path), "--check"], capsys)
    assert status == 2
    assert "'echo' is provided by both 'first' and 'second'" in err
    assert "namespace" in err


def test_namespace_resolves_the_collision(write_config, capsys) -> None:
    path = write_config(
        """\
        servers:
          first:
            module: helpers.servers.sample_servers:echo_server
          second:
            module: helpers.servers.sample_servers:echo_server
            namespace: two
          greeter:
            module: helpers.servers.sample_servers:make_echo
            settings: {greeting: hi}
        """
    )
    status, out, err = run_main(["--config", str(path), "--check"], capsys)
    assert status == 0, err
    assert "two_echo" in out
    assert "greet" in out
    assert "OK: 3 tools from 3 servers" in out
