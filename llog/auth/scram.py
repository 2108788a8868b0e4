"""SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka uses them (KIP-84):
deriving a user's stored credential from a password, and the server's side of one
authentication exchange. Pure code: no I/O.

A credential keeps only the salt, the iteration count and two keys derived from the
salted password (``StoredKey``, ``ServerKey``), never the password: a reader of etcd
cannot log in with it, and a client proves it knows the password without sending it."""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
from dataclasses import dataclass

from llog.errors import InvalidInput

#: Mechanism name → hash name; Kafka's names.
MECHANISMS = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
#: Kafka's default and minimum iteration count (``kafka-configs.sh`` uses 4096).
DEFAULT_ITERATIONS = 4096
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384


@dataclass(frozen=True)
class ScramCredential:
    """What a broker keeps of a user's password for one mechanism."""

    mechanism: str
    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes


class ScramFailure(Exception):
    """The exchange failed; the message is safe to send to the client."""


def derive(mechanism: str, password: str, *, iterations: int = DEFAULT_ITERATIONS,
           salt: bytes | None = None) -> ScramCredential:
    """The credential for ``password`` (a fresh 32-byte salt unless one is given)."""
    if mechanism not in MECHANISMS:
        raise InvalidInput(f"unknown SCRAM mechanism {mechanism!r}: use one of {', '.join(MECHANISMS)}")
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise InvalidInput(f"SCRAM iterations must be in {MIN_ITERATIONS}..{MAX_ITERATIONS}, got {iterations}")
    if not password:
        raise InvalidInput("the password is empty")
    salt = os.urandom(32) if salt is None else salt
    return from_salted_password(mechanism, salt, iterations,
                                hashlib.pbkdf2_hmac(MECHANISMS[mechanism], password.encode(), salt, iterations))


def from_salted_password(mechanism: str, salt: bytes, iterations: int, salted: bytes) -> ScramCredential:
    """The credential of a salted password (``Hi(password, salt, iterations)``), which is
    what Kafka's AlterUserScramCredentials sends instead of the password."""
    h = MECHANISMS[mechanism]
    client_key = hmac.digest(salted, b"Client Key", h)
    return ScramCredential(mechanism, salt, iterations, hashlib.new(h, client_key).digest(),
                           hmac.digest(salted, b"Server Key", h))


def password_matches(cred: ScramCredential, password: str) -> bool:
    """Whether ``password`` is the one ``cred`` was derived from (SASL/PLAIN's check)."""
    again = derive(cred.mechanism, password or "\0", iterations=cred.iterations, salt=cred.salt)
    return hmac.compare_digest(again.stored_key, cred.stored_key)


def _attributes(message: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in message.split(","):
        key, sep, value = part.partition("=")
        if not sep or len(key) != 1:
            raise ScramFailure(f"malformed SCRAM message part {part[:40]!r}")
        out.setdefault(key, value)
    return out


def _text(message: bytes) -> str:
    try:
        return message.decode()
    except UnicodeDecodeError:
        raise ScramFailure("the SCRAM message is not UTF-8") from None


def _unescape(name: str) -> str:
    """A SCRAM ``saslname`` back to the user name (``=2C`` is ``,``, ``=3D`` is ``=``)."""
    if "=" in name.replace("=2C", "").replace("=3D", ""):
        raise ScramFailure("malformed user name")
    return name.replace("=2C", ",").replace("=3D", "=")


class ScramServer:
    """The server side of one exchange: :meth:`first` with the client's first message
    (returns the user name; the caller then looks up the credential), :meth:`challenge`
    for the server's first message, :meth:`final` with the client's final message
    (returns the server's final message, or raises :class:`ScramFailure`)."""

    def __init__(self, mechanism: str) -> None:
        self.mechanism = mechanism
        self.hash = MECHANISMS[mechanism]
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""
        self._cred: ScramCredential | None = None

    def first(self, message: bytes) -> str:
        gs2, sep, bare = _text(message).partition(",")
        authzid, sep2, bare = bare.partition(",")
        if not (sep and sep2) or gs2 not in ("n", "y") or (authzid and not authzid.startswith("a=")):
            raise ScramFailure("malformed SCRAM client-first message (channel binding is not supported)")
        attrs = _attributes(bare)
        if "m" in attrs or not attrs.get("n") or not attrs.get("r"):
            raise ScramFailure("malformed SCRAM client-first message")
        user = _unescape(attrs["n"])
        if authzid and _unescape(authzid[2:]) != user:
            raise ScramFailure("an authorization id other than the user is not supported")
        self._client_first_bare = bare
        self._nonce = attrs["r"] + secrets.token_urlsafe(24)
        return user

    def challenge(self, cred: ScramCredential | None, user: str) -> bytes:
        """The server-first message; for an unknown user (``cred`` None) a made-up salt,
        so the exchange fails only at its end and does not tell which users exist."""
        if cred is None or cred.mechanism != self.mechanism:
            fake = hashlib.sha256(b"llog-no-such-user\0" + user.encode()).digest()
            self._cred = None
            salt, iterations = fake, DEFAULT_ITERATIONS
        else:
            self._cred = cred
            salt, iterations = cred.salt, cred.iterations
        self._server_first = f"r={self._nonce},s={base64.b64encode(salt).decode()},i={iterations}"
        return self._server_first.encode()

    def final(self, message: bytes) -> bytes:
        without_proof, sep, proof_part = _text(message).rpartition(",p=")
        if not sep:
            raise ScramFailure("malformed SCRAM client-final message")
        attrs = _attributes(without_proof)
        if attrs.get("r") != self._nonce:
            raise ScramFailure("the SCRAM nonce does not match")
        if attrs.get("c") not in ("biws", "eSws"):  # base64 of "n,," and "y,,"
            raise ScramFailure("channel binding is not supported")
        try:
            proof = base64.b64decode(proof_part, validate=True)
        except ValueError:
            raise ScramFailure("malformed SCRAM proof") from None
        cred = self._cred
        auth = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        if cred is None or len(proof) != len(cred.stored_key):
            raise ScramFailure("authentication failed: unknown user or wrong password")
        signature = hmac.digest(cred.stored_key, auth, self.hash)
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if not hmac.compare_digest(hashlib.new(self.hash, client_key).digest(), cred.stored_key):
            raise ScramFailure("authentication failed: unknown user or wrong password")
        return b"v=" + base64.b64encode(hmac.digest(cred.server_key, auth, self.hash))
