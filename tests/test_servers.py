import socket
import urllib.request

from lsmstore.testing.servers import MotoServer


def test_redis_server_answers_ping(redis_server_url: str) -> None:
    host_port = redis_server_url.split("//")[1].split("/")[0]
    host, port = host_port.rsplit(":", 1)
    with socket.create_connection((host, int(port)), 2) as s:
        s.sendall(b"PING\r\n")
        assert s.recv(64) == b"+PONG\r\n"


def test_moto_server_is_on_loopback(moto: MotoServer) -> None:
    assert moto.endpoint.startswith("http://127.0.0.1:")
    with urllib.request.urlopen(moto.endpoint + "/moto-api/data.json", timeout=5) as r:
        assert r.status == 200
