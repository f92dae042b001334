"""The Python clients (sync and asyncio) against a TLS listener, with a CA made here by
the openssl command line, and tokens with narrow scopes."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import tempfile
from pathlib import Path
from typing import Iterator, Tuple

import pytest

from baton import (
    AsyncClient,
    Client,
    DaemonUnreachableError,
    ForbiddenError,
    UnauthenticatedError,
)
from batonproc import Daemon


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_ca(dir: Path, name: str) -> None:
    """ca.pem and ca.key in `dir`."""
    openssl(
        "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", f"/CN={name}",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        "-addext", "subjectKeyIdentifier=hash",
        cwd=dir,
    )


def make_server_cert(dir: Path) -> None:
    """server.pem and server.key for localhost and 127.0.0.1, signed by dir's CA."""
    openssl(
        "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=localhost",
        cwd=dir,
    )
    (dir / "ext.cnf").write_text(
        "subjectAltName=DNS:localhost,IP:127.0.0.1\n"
        "basicConstraints=critical,CA:FALSE\n"
        "keyUsage=critical,digitalSignature\n"
        "extendedKeyUsage=serverAuth\n"
        "subjectKeyIdentifier=hash\n"
        "authorityKeyIdentifier=keyid,issuer\n"
    )
    openssl(
        "x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
        "-CAcreateserial", "-out", "server.pem", "-days", "2", "-extfile", "ext.cnf",
        cwd=dir,
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def tls() -> Iterator[Tuple[Daemon, str, Path]]:
    """A daemon with a TLS listener: (daemon, its URL, the CA's PEM)."""
    with tempfile.TemporaryDirectory(prefix="baton-tls-") as tmp:
        certs = Path(tmp) / "certs"
        home = Path(tmp) / "home"
        certs.mkdir()
        home.mkdir(mode=0o700)
        make_ca(certs, "Baton test CA")
        make_server_cert(certs)
        port = free_port()
        d = Daemon(
            home,
            [
                "--listen", f"tls://127.0.0.1:{port}",
                "--tls-cert", str(certs / "server.pem"),
                "--tls-key", str(certs / "server.key"),
            ],
        )
        try:
            yield d, f"tls://localhost:{port}", certs / "ca.pem"
        finally:
            d.stop()


def token(daemon: Daemon, *scopes: str) -> str:
    return str(daemon.call("CreateToken", {"name": "py-agent", "scopes": list(scopes)})["token"])


def test_sync_client_over_tls(tls: Tuple[Daemon, str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    daemon, url, ca = tls
    monkeypatch.setenv("BATON_TLS_CA", str(ca))
    secret = token(daemon, "kv:write:py-sync", "locks:tool:*", "events:read")
    with Client(url=url, token=secret, timeout=30) as c:
        assert c.set("py-sync", "k", {"n": 1}, expected_version=0).version == 1
        assert c.get("py-sync", "k").value == {"n": 1}
        assert c.update("py-sync", "k", lambda v: {"n": v["n"] + 1}).version == 2
        with c.lock("tool:py-sync", ttl_secs=30) as lease:
            assert lease.fencing_token >= 1
        with pytest.raises(ForbiddenError) as denied:
            c.get("elsewhere", "k")
        assert denied.value.code == 403 and denied.value.needed == "kv:read:elsewhere"
        sub = c.subscribe({"namespace": "py-sync"}, since_seq=0)
        try:
            event = sub.next(timeout=30)
            assert event is not None and event.namespace == "py-sync"
        finally:
            sub.close()
    # BATON_URL and BATON_TOKEN from the environment.
    monkeypatch.setenv("BATON_URL", url)
    monkeypatch.setenv("BATON_TOKEN", secret)
    with Client() as c:
        assert c.get("py-sync", "k").version == 2


def test_bad_tokens_and_unknown_cas_are_refused(tls: Tuple[Daemon, str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    daemon, url, ca = tls
    monkeypatch.setenv("BATON_TLS_CA", str(ca))
    with pytest.raises(UnauthenticatedError) as refused:
        Client(url=url, token="baton_wrong").get("a", "b")
    assert refused.value.code == 401 and "baton_wrong" not in str(refused.value)
    # Without a token: 401 at the first call that needs one; Health needs none.
    with Client(url=url) as c:
        assert c.health()["status"] == "ok"
        with pytest.raises(UnauthenticatedError):
            c.get("a", "b")
    with tempfile.TemporaryDirectory() as other:
        make_ca(Path(other), "Someone else's CA")
        monkeypatch.setenv("BATON_TLS_CA", str(Path(other) / "ca.pem"))
        with pytest.raises(DaemonUnreachableError) as unreachable:
            Client(url=url, token=token(daemon, "kv:read:*")).get("a", "b")
        assert "BATON_TLS_CA" in str(unreachable.value)


def test_async_client_over_tls(tls: Tuple[Daemon, str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    daemon, url, ca = tls
    monkeypatch.setenv("BATON_TLS_CA", str(ca))
    secret = token(daemon, "kv:write:py-async", "events:read")

    async def main() -> None:
        async with AsyncClient(url=url, token=secret) as c:
            results = await asyncio.gather(*(c.set("py-async", f"k{i}", i) for i in range(20)))
            assert sorted(r.version for r in results) == [1] * 20
            assert (await c.get("py-async", "k7")).value == 7
            with pytest.raises(ForbiddenError) as denied:
                await c.set("other", "k", 1)
            assert denied.value.needed == "kv:write:other"
            sub = await c.subscribe({"namespace": "py-async"}, since_seq=0)
            try:
                event = await asyncio.wait_for(sub.__anext__(), 30)
                assert event.namespace == "py-async"
            finally:
                await sub.close()
        with pytest.raises(UnauthenticatedError):
            async with AsyncClient(url=url, token="baton_nope") as bad:
                await bad.get("py-async", "k1")

    asyncio.run(main())


def test_urls_are_checked() -> None:
    for bad in ["http://x:1", "tls://nohost", "unix://relative/path", "tcp://:7"]:
        with pytest.raises(ValueError):
            Client(url=bad)
