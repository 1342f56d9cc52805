"""Held-out variants of "the API key and URL credentials are never printed, logged,
written or exported": a key echoed in another form (base64, percent-encoded, JSON
escapes that hide it until decoded, then cut), a proxy that echoes its own
credentials, and a token in the URL's fragment.  Each leaked before the fix."""

from __future__ import annotations

import base64
import json
import urllib.parse

import pytest

from tests.fakeserver import Reply, models_reply
from prefilltui.cli import main
from prefilltui.measure.probe import ProbeClient
from prefilltui.model.redact import display_url, scrub_secrets

KEY = "sk-live-ab+cd/ef==Zq9x7Hk2"


def forms(key: str) -> dict[str, str]:
    """How a gateway may echo the key it got."""
    b = key.encode()
    return {
        "base64": base64.b64encode(b).decode(),
        "base64url": base64.urlsafe_b64encode(b).decode().rstrip("="),
        "basic user:key": base64.b64encode(b"apiuser:" + b).decode(),
        "bearer header b64": base64.b64encode(b"Bearer " + b).decode(),
        "percent": urllib.parse.quote(key, safe=""),
        "percent lower": urllib.parse.quote(key, safe="").lower(),
        "plus": urllib.parse.quote_plus(key),
    }


def leaks(text: str, key: str = KEY) -> list[str]:
    """The forms of ``key`` (or a run of 8+ of its characters) found in ``text``."""
    found = [name for name, f in forms(key).items() if f[2:-2] in text]
    found += [f"key[{i}:{i + 8}]" for i in range(len(key) - 7) if key[i:i + 8] in text]
    return found


@pytest.mark.parametrize("form", list(forms(KEY)))
async def test_a_key_echoed_encoded_never_reaches_the_message(fake_server, form):
    echoed = forms(KEY)[form]
    srv = fake_server({"GET /v1/models": models_reply("m"), "POST /v1/completions": Reply.json(
        {"error": {"message": f"invalid credentials {echoed} for this deployment"}}, 401)})
    async with ProbeClient(srv.base_url, model="m", api_key=KEY, timeout=5) as c:
        r = await c.probe(16, prompt="hello world")
    assert r.error_kind == "http" and "invalid credentials" in r.error_message
    assert leaks(r.error_message) == [], r.error_message  # was: the encoded key, whole


async def test_a_key_hidden_by_json_escapes_is_scrubbed_before_the_500_character_cut(fake_server):
    """The raw body holds ``\\u0073\\u006b...``: no match before decoding; decoded, the
    message was cut at 500 characters through the key, so the scrub after the cut missed
    the first 10 characters of it."""
    escaped = "".join(f"\\u{ord(ch):04x}" for ch in KEY)
    body = '{"error": "' + "x" * 490 + escaped + '"}'
    srv = fake_server({"GET /v1/models": models_reply("m"), "POST /v1/completions": Reply(
        401, {"Content-Type": "application/json"}, body.encode())})
    async with ProbeClient(srv.base_url, model="m", api_key=KEY, timeout=5) as c:
        r = await c.probe(16, prompt="hello world")
    assert r.error_kind == "http"
    assert KEY[:8] not in r.error_message and leaks(r.error_message) == []


def test_a_proxy_echoing_its_credentials_is_scrubbed_and_says_what_to_do(fake_server, tmp_path,
                                                                        capsys, monkeypatch):
    """A proxy answering 407 with the Proxy-Authorization it got and the password decoded."""
    def deny(req):
        got = req.headers.get("proxy-authorization", "")
        pair = base64.b64decode(got.split()[-1]).decode() if got else ""
        return Reply.text(f"Proxy-Authorization: {got} / user:pass {pair} / bad password "
                          f"{pair.split(':')[-1]}", status=407)

    host = "http://llm.holdout.invalid"  # a proxy gets the absolute URL
    proxy = fake_server({f"GET {host}/v1/models": deny, f"POST {host}/v1/completions": deny,
                         f"GET {host}/metrics": deny})
    monkeypatch.setenv("HTTP_PROXY", f"http://puser:PPASS_secret_91@{proxy.base_url[7:]}")
    out = tmp_path / "run.jsonl"
    rc = main(["sweep", "http://llm.holdout.invalid/v1", "--lengths", "50,100", "--repeats", "1",
               "--warmup", "0", "--no-telemetry", "--out", str(out)])
    cap = capsys.readouterr()
    shown = cap.out + cap.err + out.read_text()
    assert rc == 3
    assert "PPASS_secret_91" not in shown and "cHVzZXI6UFBBU1Nfc2VjcmV0Xzkx" not in shown
    assert leaks(shown, "PPASS_secret_91") == []
    assert "asks for credentials" in shown and "put USER:PASSWORD@ before its host" in shown


def test_a_token_in_the_url_fragment_is_never_shown(fake_server, tmp_path, capsys):
    srv = fake_server({"GET /v1/models": models_reply("m"),
                       "POST /v1/completions": Reply.json({"error": {"message": "no"}}, 400)})
    url = srv.base_url + "/v1#access_token=FRAGSECRET123"
    rc = main(["sweep", url, "--lengths", "50,100", "--repeats", "1", "--warmup", "0",
               "--no-telemetry", "--out", str(tmp_path / "run.jsonl")])
    cap = capsys.readouterr()
    assert rc == 3
    assert "FRAGSECRET123" not in cap.out + cap.err + (tmp_path / "run.jsonl").read_text()
    assert display_url("https://h/v1#access_token=x") == "https://h/v1"


@pytest.mark.parametrize("text, want", [
    ("see https://h/cb#access_token=eyJabc&state=1", "see https://h/cb#access_token=***&state=1"),
    ("GET /o?X-Amz-Security-Token=AQoD&X-Amz-Signature=9f", "GET /o?X-Amz-Security-Token=***"
                                                           "&X-Amz-Signature=***"),
    ("POST /v1?subscription-key=abc&page=2", "POST /v1?subscription-key=***&page=2"),
    ("Proxy-Authorization: Basic cHVzZXI6cHc=", "Proxy-Authorization: Basic ***"),
])
def test_url_secrets_and_echoed_auth_headers_are_scrubbed_without_a_key(text, want):
    assert scrub_secrets(text) == want


def test_the_forms_do_not_eat_the_servers_words():
    text = json.dumps({"error": "prompt is empty; see https://docs/x?page=2#key-points"})
    assert scrub_secrets(text, "EMPTY") == text
    assert scrub_secrets("the token budget is 4096", KEY) == "the token budget is 4096"


def test_an_exporter_target_named_with_a_pasted_url_keeps_its_password_out(tmp_path):
    """``name = "http://alice:PW@gpu-01:8000?api_key=K"`` (the URL pasted as the name):
    the name is the ``target`` label of every series, the run file's name and every log
    line; the password and the key went there as written."""
    from prefilltui.exporter.config import load_toml

    cfg = tmp_path / "t.toml"
    cfg.write_text('[[target]]\nurl = "http://127.0.0.1:1"\n'
                   'name = "http://alice:PW_SECRET_77@gpu-01:8000/v1?api_key=KEY_SECRET_77"\n')
    (t,) = load_toml(str(cfg))
    assert "SECRET" not in t.label and "SECRET" not in t.slug
    assert t.label == "http://***@gpu-01:8000/v1?api_key=***"
