"""Secrets from hostile inputs: URL credentials redacted where URLs enter (one home:
``model/redact.py``), secrets scrubbed before any cut, a key echoed in a number field
never copied."""

from __future__ import annotations

import asyncio

import pytest

from prefilltui.measure.probe import ProbeClient
from prefilltui.model import redact
from tests.fakeserver import Reply, models_reply, sse_data, sse_done, sse_text

KEY = "sk-ABCDEFGHIJKLMNOPQRSTU"  # 24 characters, as in the report


@pytest.mark.parametrize("url, shown", [
    ("http://alice:PW@host:8000/v1", "http://alice:***@host:8000/v1"),
    ("http://TOKEN123@host/v1", "http://***@host/v1"),
    ("http://host/v1?api_key=S1&x=1", "http://host/v1?api_key=***&x=1"),
    ("http://host/?api-key=S1", "http://host/?api-key=***"),
    ("http://host/?apiKey=S1&token=S2&access_token=S3&password=S4&hf_token=S5",
     "http://host/?apiKey=***&token=***&access_token=***&password=***&hf_token=***"),
    ("http://host/?X-Amz-Signature=S1&subscription-key=S2&client_secret=S3&key=S4",
     "http://host/?X-Amz-Signature=***&subscription-key=***&client_secret=***&key=***"),
    ("http://host:8000/v1", "http://host:8000/v1"),
    ("http://host/?model=llama&n=3", "http://host/?model=llama&n=3"),
])
def test_display_url_masks_every_credential(url, shown):
    assert redact.display_url(url) == shown


def test_split_credentials_leaves_a_clean_url():
    c = redact.split_credentials("https://al%40ice:p%3Ass@h:1/v1?api_key=K&x=1#frag")
    assert c.url == "https://h:1/v1"
    assert (c.username, c.password) == ("al@ice", "p:ss")
    assert c.params == (("api_key", "K"), ("x", "1"))
    assert not redact.split_credentials("http://h/v1").has_userinfo


def test_scrub_secrets_without_a_key_still_masks_url_credentials():
    text = "failed GET http://bob:hunter22@h/v1/models?token=abcdef (401)"
    assert redact.scrub_secrets(text) == "failed GET http://***@h/v1/models?token=*** (401)"


def _run(coro):
    return asyncio.run(coro)


async def _probe_against(srv, *, key: str | None = KEY, base: str | None = None):
    async with ProbeClient(base or srv.base_url, api_key=key, timeout=5) as c:
        await c.discover()
        return c, await c.probe(16, prompt="a b c")


def test_a_key_at_character_285_of_an_html_401_never_leaks_in_part(fake_server):
    """3: the message is cut at 300 characters; scrubbed after the cut, the first 15
    characters of the key stayed."""
    page = "<html><body>" + "x" * (285 - 12) + KEY + " is not a valid key</body></html>"
    assert page.index(KEY) == 285
    srv = fake_server({"GET /v1/models": models_reply("m"),
                       "POST /v1/completions": Reply.text(page, 401, "text/html")})
    c, r = _run(_probe_against(srv))
    assert not r.ok and r.http_status == 401
    assert KEY[:6] not in r.error_message and KEY[3:12] not in r.error_message
    assert "***" in c.errors.last_body and KEY[:6] not in c.errors.last_body


def test_a_key_echoed_in_a_number_field_is_never_copied(fake_server):
    """3: ``usage.prompt_tokens`` holding the key: ignored, described, never quoted."""
    def reply(req):
        return Reply.sse([(0.0, sse_text("x")),
                          (0.0, sse_data({"choices": [], "usage": {"prompt_tokens": KEY}})),
                          (0.0, sse_done())])
    srv = fake_server({"GET /v1/models": models_reply("m"), "POST /v1/completions": reply})
    c, r = _run(_probe_against(srv))
    assert r.ok and r.prompt_tokens_source != "usage"
    said = " | ".join(r.notes.ignored) + " | " + " | ".join(c.notices.values())
    assert "usage.prompt_tokens (a string of 24 characters) is not a token count" in said
    for cut in (KEY, KEY[:15], KEY[3:12]):
        assert cut not in said


def test_a_short_key_in_a_number_field_is_not_copied_either(fake_server):
    """A key the scrubber would not recognise (short, or placeholder-like) is still never
    copied from a number field: the value is described, not quoted."""
    def reply(req):
        return Reply.sse([(0.0, sse_text("x")),
                          (0.0, sse_data({"choices": [], "usage": {"prompt_tokens": "pw-123"}})),
                          (0.0, sse_done())])
    srv = fake_server({"GET /v1/models": models_reply("m"), "POST /v1/completions": reply})
    c, r = _run(_probe_against(srv, key="pw-123"))
    assert "pw-123" not in " ".join(r.notes.ignored)


def test_url_credentials_echoed_by_the_server_are_scrubbed(fake_server):
    """2: a server echoing the URL's password or query key in its error."""
    def reply(req):
        return Reply.json({"error": {"message": f"bad creds: PASSWORD123 / {req.query}"}}, 403)
    srv = fake_server({"GET /v1/models": models_reply("m"), "POST /v1/completions": reply})
    base = srv.base_url.replace("http://", "http://alice:PASSWORD123@") + "?api_key=QSECRET99"
    c, r = _run(_probe_against(srv, key=None, base=base))
    assert not r.ok and "PASSWORD123" not in r.error_message
    assert "QSECRET99" not in r.error_message and "api_key=***" in r.error_message


def test_url_user_password_does_not_replace_the_api_key(fake_server):
    """11: with an API key, ``user:pass@`` is not sent (it would replace the Bearer key
    with Basic auth); the session says so.  Without a key it is sent as Basic auth."""
    srv = fake_server({"GET /v1/models": models_reply("m"),
                       "POST /v1/completions": Reply.sse([(0.0, sse_text("x", "length")),
                                                          (0.0, sse_done())])})
    base = srv.base_url.replace("http://", "http://alice:PASSWORD123@")
    c, r = _run(_probe_against(srv, base=base))
    assert {q.headers["authorization"] for q in srv.requests} == {f"Bearer {KEY}"}
    assert "user:password is not sent" in c.notices["URL user:password not sent"]
    assert "alice" not in c.root and "PASSWORD123" not in repr(c) + c.info.base_url
    srv.requests.clear()
    c, r = _run(_probe_against(srv, key=None, base=base))
    assert {q.headers["authorization"] for q in srv.requests} == {
        "Basic YWxpY2U6UEFTU1dPUkQxMjM="}  # alice:PASSWORD123
    assert "Basic auth from the URL" in c.notices
