"""SCRAM: RFC 7677's exchange, the stored credentials, the admin APIs
(AlterUserScramCredentials, DescribeUserScramCredentials) and ``brokkr scram``."""

from __future__ import annotations

import base64
import json
import secrets

import pytest
from brokkr.core.cli import main
from brokkr.core.errors import ConfigError, ErrorCode
from brokkr.core.plugins import hookimpl
from brokkr.core.sasl import SaslException
from brokkr.core.scram import ScramCredential, ScramCredentials, ScramMechanism
from brokkr.core.testing import RawClient
from brokkr.plugins.auth.scram import ScramSaslServer
from sasl_wire import alter_scram, deletion, describe_scram, login, sasl_config, upsertion


class MemoryState:
    """The two storage methods the credential store uses."""

    def __init__(self, text: str | None = None):
        self.docs = {} if text is None else {"scram-credentials": text}

    def read_state(self, name):
        return self.docs.get(name)

    def write_state(self, name, text):
        self.docs[name] = text


def test_rfc7677_example_exchange():
    """RFC 7677 section 3: user "user", password "pencil", SCRAM-SHA-256."""
    mechanism = ScramMechanism.SCRAM_SHA_256
    store = ScramCredentials(MemoryState())
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    store.put("user", mechanism, ScramCredential.from_password(mechanism, "pencil", 4096, salt))
    server = ScramSaslServer(mechanism, store, server_nonce="%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0")
    server_first = server.step(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    assert server_first == b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    assert not server.complete
    server_final = server.step(
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
    )
    assert server_final == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    assert server.complete and server.authorization_id == "user"
    with pytest.raises(SaslException):
        server.step(b"n,,n=user,r=again")  # an exchange never restarts


def test_a_failed_step_fails_the_exchange_for_good():
    mechanism = ScramMechanism.SCRAM_SHA_512
    store = ScramCredentials(MemoryState())
    store.put("u", mechanism, ScramCredential.from_password(mechanism, "p"))
    server = ScramSaslServer(mechanism, store)
    server.step(b"n,,n=u,r=abc")
    with pytest.raises(SaslException):
        server.step(b"c=biws,r=wrong,p=AAAA")
    with pytest.raises(SaslException):
        server.step(b"c=biws,r=wrong,p=AAAA")
    assert not server.complete


def test_credentials_keep_no_password_and_survive_a_round_trip():
    state = MemoryState()
    store = ScramCredentials(state)
    for mechanism in ScramMechanism:
        store.put("alice", mechanism, ScramCredential.from_password(mechanism, "correct horse", 8192))
    store.save()
    assert "correct horse" not in state.docs["scram-credentials"]
    assert "correct horse" not in repr(store.get("alice", ScramMechanism.SCRAM_SHA_256))
    again = ScramCredentials(state)
    assert again.users() == ["alice"]
    assert again.of("alice") == store.of("alice")
    assert again.get("alice", ScramMechanism.SCRAM_SHA_512).iterations == 8192
    assert again.remove("alice", ScramMechanism.SCRAM_SHA_256) and not again.remove(
        "alice", ScramMechanism.SCRAM_SHA_256
    )


@pytest.mark.parametrize(
    "text",
    ["not json", json.dumps({"version": 2, "users": {}}), json.dumps({"version": 1, "users": {"a": {"MD5": {}}}})],
)
def test_unreadable_stored_credentials_are_a_config_error(text):
    with pytest.raises(ConfigError, match="scram-credentials"):
        ScramCredentials(MemoryState(text))


# -- AlterUserScramCredentials / DescribeUserScramCredentials ----------------------------------


@pytest.fixture
def admin(brokkr_broker_factory):
    broker = brokkr_broker_factory(sasl_config())
    with RawClient(broker.bootstrap_servers) as c:
        assert login(c, "PLAIN", "admin", "admin-secret").error_code == 0
        yield c


def results(response) -> dict[str, tuple[int, str | None]]:
    return {r.user: (r.error_code, r.error_message) for r in response.results}


def test_alter_then_describe(admin):
    response = alter_scram(
        admin, [upsertion("alice", "a", "SCRAM-SHA-256"), upsertion("bob", "b", "SCRAM-SHA-512", iterations=8192)]
    )
    assert results(response) == {"alice": (0, None), "bob": (0, None)}
    assert results(alter_scram(admin, [upsertion("alice", "a2", "SCRAM-SHA-512")])) == {"alice": (0, None)}
    described = describe_scram(admin)
    assert described.error_code == 0
    assert {r.user: [(i.mechanism, i.iterations) for i in r.credential_infos] for r in described.results} == {
        "alice": [(1, 4096), (2, 4096)],
        "bob": [(2, 8192)],
    }
    assert results(alter_scram(admin, deletions=[deletion("alice", 1)])) == {"alice": (0, None)}
    assert [(i.mechanism, i.iterations) for i in describe_scram(admin, ["alice"]).results[0].credential_infos] == [
        (2, 4096)
    ]


def test_alter_refuses_what_kafka_refuses(admin):
    alter_scram(admin, [upsertion("dave", "d")])
    response = alter_scram(
        admin,
        [
            upsertion("few", "x", iterations=4095),
            upsertion("many", "x", iterations=16385),
            upsertion("", "x"),
            upsertion("md5", "x", mechanism="MD5"),
            upsertion("twice", "x", "SCRAM-SHA-256"),
            upsertion("twice", "x", "SCRAM-SHA-512"),
            upsertion("nosalt", "x", salt=b""),
            upsertion("ok", "x"),
        ],
        [deletion("ghost"), deletion("dave", 2), deletion("dave2", 0)],
    )
    twice = "A user credential cannot be altered twice in the same request"
    assert results(response) == {
        "few": (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations"),
        "many": (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too many iterations"),
        "": (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"),
        "md5": (ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"),
        "twice": (ErrorCode.DUPLICATE_RESOURCE, twice),
        "nosalt": (ErrorCode.UNACCEPTABLE_CREDENTIAL, "The salt must be 1 to 1024 bytes"),
        "ok": (0, None),
        "ghost": (ErrorCode.RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist"),
        "dave": (ErrorCode.RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist"),
        "dave2": (ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"),
    }
    assert sorted(r.user for r in describe_scram(admin).results) == ["dave", "ok"]


def test_describe_unknown_and_repeated_users(admin):
    alter_scram(admin, [upsertion("erin", "e")])
    response = describe_scram(admin, ["erin", "nobody", "erin"])
    assert results(response) == {
        "erin": (
            ErrorCode.DUPLICATE_RESOURCE,
            "Cannot describe SCRAM credentials for the same user twice in a single request: erin",
        ),
        "nobody": (ErrorCode.RESOURCE_NOT_FOUND, "Attempt to describe a user credential that does not exist: nobody"),
    }
    assert describe_scram(admin, []).results == describe_scram(admin, None).results  # empty means everyone


class DenyCluster:
    @hookimpl
    def brokkr_authorize(self, actions):
        from brokkr.core.authorization import AuthorizationResult, ResourceType

        return [
            AuthorizationResult.DENIED if a.resource_type == ResourceType.CLUSTER else AuthorizationResult.ALLOWED
            for a in actions
        ]


def test_the_admin_apis_need_the_cluster_permissions(brokkr_broker_factory):
    broker = brokkr_broker_factory(plugins=[DenyCluster()])
    with RawClient(broker.bootstrap_servers) as c:
        response = alter_scram(c, [upsertion("frank", "f")], [deletion("gina")])
        assert {r.user: r.error_code for r in response.results} == {
            "frank": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
            "gina": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
        }
        response = describe_scram(c, ["frank"])
        assert response.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        assert [r.error_code for r in response.results] == [ErrorCode.CLUSTER_AUTHORIZATION_FAILED]


# -- brokkr scram ----------------------------------------------------------------------------


def test_cli_adds_lists_and_removes_users_that_a_broker_then_authenticates(tmp_path, capsys, brokkr_broker_factory):
    data = str(tmp_path / "data")
    where = ["--override", f"log.dirs={data}"]
    assert main(["scram", "add", "hana", "--password", "hana-secret", "--mechanism", "SCRAM-SHA-512", *where]) == 0
    assert main(["scram", "add", "ivan", "--password", "ivan-secret", "--iterations", "8192", *where]) == 0
    assert main(["scram", "add", "gone", "--password", "gone-secret", *where]) == 0
    assert main(["scram", "remove", "gone", *where]) == 0
    assert main(["scram", "remove", "gone", *where]) == 1
    capsys.readouterr()
    assert main(["scram", "list", *where]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "SCRAM credential configs for user-principal 'hana' are SCRAM-SHA-512=iterations=4096",
        "SCRAM credential configs for user-principal 'ivan' are SCRAM-SHA-256=iterations=8192",
    ]
    stored = (tmp_path / "data" / "brokkr-scram-credentials.json").read_text()
    assert "hana-secret" not in stored and "ivan-secret" not in stored

    broker = brokkr_broker_factory(sasl_config(**{"log.dirs": data}))
    with RawClient(broker.bootstrap_servers) as c:
        assert login(c, "SCRAM-SHA-512", "hana", "hana-secret").error_code == 0
    with RawClient(broker.bootstrap_servers) as c:
        assert login(c, "SCRAM-SHA-256", "ivan", "ivan-secret").error_code == 0
    with RawClient(broker.bootstrap_servers) as c:
        assert login(c, "SCRAM-SHA-256", "gone", "gone-secret").error_code == ErrorCode.SASL_AUTHENTICATION_FAILED


def test_cli_refuses_bad_input(tmp_path, capsys, monkeypatch):
    where = ["--override", f"log.dirs={tmp_path}"]
    assert main(["scram", "add", "x", "--password", "p", "--iterations", "100", *where]) == 2
    assert "Too few iterations" in capsys.readouterr().err
    assert main(["scram", "add", "x", "--password", "p", "--override", "brokkr.storage=memory"]) == 2
    assert "keeps nothing across restarts" in capsys.readouterr().err
    monkeypatch.setattr("sys.stdin", __import__("io").StringIO(secrets.token_hex(4) + "\n"))
    assert main(["scram", "add", "from-stdin", *where]) == 0
