"""An identity provider on 127.0.0.1 for the tests of the daemon's incoming sign-in
(``transport.auth.jwt``): its published keys (JWKS), a minimal authorization-code flow, and
JWTs signed with keys made here with joserfc."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl

AUDIENCE = "dpt-test"
SCOPE = "tools"


class KeyServer:
    """An identity provider on 127.0.0.1: ``/jwks.json`` (the public keys now published,
    fetches counted) and, for the sign-in test, OAuth metadata, client registration, an
    ``/authorize`` that signs the user ``signed-in-user`` in at once, and a ``/token`` that
    hands out a JWT signed with :attr:`signer` (the requests it got are kept)."""

    def __init__(self) -> None:
        self.published: list[dict[str, Any]] = []
        self.fetches = 0
        self.signer: Any = None
        self.token_requests: list[dict[str, str]] = []
        self.authorize_requests: list[dict[str, str]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path, _, query = self.path.partition("?")
                if path == "/jwks.json":
                    server.fetches += 1
                    self.reply(200, {"keys": server.published})
                elif path == "/.well-known/oauth-authorization-server":
                    self.reply(200, server.metadata())
                elif path == "/authorize":
                    params = dict(parse_qsl(query))
                    server.authorize_requests.append(params)
                    target = f"{params['redirect_uri']}?code=the-code&state={params['state']}"
                    self.send_response(302)
                    self.send_header("Location", target)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                else:
                    self.send_error(404)

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if self.path == "/register":
                    self.reply(201, {**json.loads(body), "client_id": "registered-client"})
                elif self.path == "/token":
                    form = dict(parse_qsl(body.decode()))
                    server.token_requests.append(form)
                    token = signed(server.signer, server.issuer, sub="signed-in-user")
                    self.reply(
                        200, {"access_token": token, "token_type": "Bearer", "expires_in": 600}
                    )
                else:
                    self.send_error(404)

            def reply(self, status: int, document: dict[str, Any]) -> None:
                body = json.dumps(document).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.issuer = self.base + "/"
        self.jwks_uri = self.base + "/jwks.json"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def metadata(self) -> dict[str, Any]:
        return {
            "issuer": self.issuer,
            "authorization_endpoint": self.base + "/authorize",
            "token_endpoint": self.base + "/token",
            "registration_endpoint": self.base + "/register",
            "jwks_uri": self.jwks_uri,
            "response_types_supported": ["code"],
            "grant_types_supported": ["authorization_code", "refresh_token"],
            "code_challenge_methods_supported": ["S256"],
            "token_endpoint_auth_methods_supported": ["none"],
        }

    def publish(self, *keys: Any) -> None:
        self.published = [key.as_dict(private=False) for key in keys]

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def rsa_key(kid: str) -> Any:
    from joserfc.jwk import RSAKey

    return RSAKey.generate_key(2048, parameters={"kid": kid, "use": "sig", "alg": "RS256"})


def signed(key: Any, issuer: str, kid: str | None = None, **claims: Any) -> str:
    """A JWT issued by *issuer*, signed by *key* (named *kid*, default the key's own): valid for
    a daemon verifying :data:`AUDIENCE` and :data:`SCOPE` unless *claims* say otherwise (None
    drops one)."""
    from joserfc import jwt

    now = int(time.time())
    base = {
        "iss": issuer,
        "aud": AUDIENCE,
        "sub": "alice",
        "scope": f"openid {SCOPE}",
        "iat": now,
        "exp": now + 600,
    }
    merged = {k: v for k, v in {**base, **claims}.items() if v is not None}
    return jwt.encode({"alg": "RS256", "kid": kid or key.kid}, merged, key)


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}
