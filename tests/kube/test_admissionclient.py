"""The API server's side of a webhook call, against a small HTTPS server whose certificate a
trustme CA signs: the review is POSTed as JSON and the answer read back; a status other than
200, an answer that is not an object, or a server the CA did not sign is refused."""

from __future__ import annotations

import contextlib
import ssl
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import orjson
import pytest
import trustme

from cudasched.kube.admissionclient import AdmissionClient
from cudasched.vocab.errors import InputError

REVIEW = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": "u"}}


class _Webhook(BaseHTTPRequestHandler):
    """Allows on ``/allow`` (echoing the uid and the content type it was sent), answers a list
    on ``/list`` and 400 anywhere else."""

    def do_POST(self) -> None:
        body = orjson.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path == "/allow":
            status = 200
            response = {"uid": body["request"]["uid"], "allowed": True}
            answer: Any = {**REVIEW, "response": response, "sent": self.headers["Content-Type"]}
        elif self.path == "/list":
            status, answer = 200, []
        else:
            status, answer = 400, {"message": "no such path"}
        data = orjson.dumps(answer)
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        return


@contextlib.contextmanager
def _serving(ca: trustme.CA) -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Webhook)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ca.issue_cert("127.0.0.1").configure_cert(context)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"https://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="module")
def url(ca: trustme.CA) -> Iterator[str]:
    with _serving(ca) as where:
        yield where


def test_a_review_is_posted_as_json_and_answered(ca: trustme.CA, url: str) -> None:
    with AdmissionClient(url, ca.cert_pem.bytes()) as client:
        answer = client.review("/allow", REVIEW)
    assert answer["response"] == {"uid": "u", "allowed": True}
    assert answer["sent"] == "application/json"


def test_an_answer_other_than_200_is_an_input_error(ca: trustme.CA, url: str) -> None:
    with AdmissionClient(url, ca.cert_pem.bytes()) as client, pytest.raises(InputError) as err:
        client.review("/elsewhere", REVIEW)
    assert str(err.value) == 'webhook answered HTTP 400: {"message":"no such path"}'


def test_an_answer_that_is_not_an_object_is_an_input_error(ca: trustme.CA, url: str) -> None:
    with AdmissionClient(url, ca.cert_pem.bytes()) as client, pytest.raises(InputError) as err:
        client.review("/list", REVIEW)
    assert "not a review" in str(err.value)


def test_a_server_another_ca_signed_is_refused(url: str) -> None:
    with (
        AdmissionClient(url, trustme.CA().cert_pem.bytes()) as client,
        pytest.raises(httpx.ConnectError),
    ):
        client.review("/allow", REVIEW)
