import socket

from lsmstore.testing.servers import MotoServer


def test_redis_server_answers_ping(redis_server_url: str) -> None:
    host_port = redis_server_url.split("//")[1].split("/")[0]
    host, port = host_port.rsplit(":", 1)
    with socket.create_connection((host, int(port)), 30) as s:
        s.sendall(b"PING\r\n")
        assert s.recv(64) == b"+PONG\r\n"


async def test_moto_server_is_on_loopback(moto: MotoServer) -> None:
    # A cheap request through the real client.  (Not /moto-api/data.json: it serialises
    # every object every earlier test stored in this session-wide server, values
    # included, so its time grows with the session; a 5 s timeout on it failed once
    # under load.)
    from aiobotocore.session import get_session

    assert moto.endpoint.startswith("http://127.0.0.1:")
    assert moto._server.server_address[0] == "127.0.0.1"  # bound to loopback only
    async with get_session().create_client(
        "s3", endpoint_url=moto.endpoint, region_name="us-east-1"
    ) as client:
        response = await client.list_buckets()
    assert response["ResponseMetadata"]["HTTPStatusCode"] == 200
