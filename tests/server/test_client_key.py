"""The client key by configuration: defaults.client_key (a cookie, a query parameter, the
address, ...) decides who a client is, for its limits, the refusal log and GET /admin/top,
and a limit's own client_key counts that limit under another key (a header, combined or
not); the same from a forward-auth check, whose query is the original request's."""

from __future__ import annotations

from ratewin_testkit import Client, write_rules

TOKEN = "s3cret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}

RULES = """
    version: "keys"
    defaults:
      client_key: [cookie:session, query:api_key, address]
    tiers:
      free:
        limits:
          - {name: per-key, max: 2, window: 1m}
          - {name: per-user, max: 3, window: 1m, client_key: [header:X-User, address]}
    default_tier: free
    """


def refused_by(reply) -> str:
    assert reply.status == 429, reply
    return reply.json()["limit"]


def test_the_client_key_comes_from_where_the_rules_say(start_server, tmp_path):
    server = start_server("--trust-proxy", "127.0.0.1",
                          rules=write_rules(tmp_path / "rules.yaml", RULES), admin_token=TOKEN)
    with Client(server.port) as c:
        # A session cookie is the key: its third request is refused by per-key, and the
        # same key given as the query parameter is the same client.
        by_cookie = [c.get("/", {"Cookie": "theme=dark; session=s1"}) for _ in range(3)]
        assert [r.status for r in by_cookie] == [200, 200, 429]
        assert refused_by(by_cookie[2]) == "tier:free/per-key"
        assert refused_by(c.get("/?api_key=s1")) == "tier:free/per-key"
        # The X-API-Key header is not a key here: these are the address's requests (each
        # its own user, as per-user goes: without X-User it would count them under the
        # address, where the cookie's requests counted already).
        by_address = [c.get("/", {"X-API-Key": f"k{i}", "X-User": f"a{i}"}) for i in range(3)]
        assert [r.status for r in by_address] == [200, 200, 429]
        assert refused_by(by_address[2]) == "tier:free/per-key"

        # per-user counts under X-User, whatever the session: the fourth request of u1
        # is refused by it, though each session has made one.
        by_user = [c.get("/", {"Cookie": f"session=u-{i}", "X-User": "u1"}) for i in range(4)]
        assert [r.status for r in by_user] == [200, 200, 200, 429]
        assert refused_by(by_user[3]) == "tier:free/per-user"
        assert c.get("/", {"Cookie": "session=u-9", "X-User": "u2"}).status == 200

    # A forward-auth check: the key is in the original request's query.
    checks = [server.get("/ratewin/check", {"X-Original-URI": "/api/x?page=1&api_key=s7",
                                            "X-Original-Method": "GET",
                                            "X-Real-IP": "192.0.2.1"}).status for _ in range(3)]
    assert checks == [200, 200, 429]

    # Clients are known by those keys in the top (and the refusal log).
    top = server.get("/admin/top", AUTH).json()
    keys = {k["key"] for rule in top["rules"] for k in rule["keys"]}
    assert {"s1", "s7", "ip:127.0.0.1"} <= keys, top
    # The rules in force say where keys come from.
    described = server.get("/admin/rules", AUTH).json()["rules"]
    assert described["defaults"]["client_key"] == ["cookie:session", "query:api_key", "address"]
    per_user = described["tiers"]["free"]["limits"][1]
    assert per_user["client_key"] == ["header:x-user", "address"]
