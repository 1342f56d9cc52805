"""An Azure OpenAI deployment URL from the field, and its kind: the
deployment shape with any name, with or without ``api-version``, pasted with its
endpoint; the key from OPENAI_API_KEY or AZURE_OPENAI_API_KEY, sent as ``api-key``
and never shown; the query on every request; the prompt-filter chunk at t = 0 is no
token (TTFT = 0.20 s); other Azure and query-carrying shapes (``urls.server_urls``)."""

from __future__ import annotations

import json

import pytest

from tests.azureserver import TEMPLATE_TOKENS, AzureServer, KNOWN_FIELDS
from tests.fakeserver import Reply, sse_data, sse_done, sse_text
from prefilltui.cli import main
from prefilltui.measure.probe import ProbeClient
from prefilltui.measure.probe.urls import AZURE_DEFAULT_API_VERSION, server_urls
from prefilltui.measure.runfile import read_run
from prefilltui.options import ProbeOptions
from prefilltui.session import read_api_key

KEY = "azkey-5f1c0e9b7a2d4c8e9f0a1b2c3d4e5f60"
LENGTHS = "50,100,200,400"


@pytest.fixture
def azure():
    servers = []

    def start(**kw) -> AzureServer:
        srv = AzureServer(key=KEY, **kw).__enter__()
        servers.append(srv)
        return srv
    yield start
    for srv in servers:
        srv.__exit__(None, None, None)


@pytest.fixture
def no_keys(monkeypatch):
    for var in ("OPENAI_API_KEY", "AZURE_OPENAI_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    return monkeypatch


def sweep(url, tmp_path, capsys, *extra, rc_want=0):
    out = tmp_path / "run.jsonl"
    rc = main(["sweep", url, "--lengths", LENGTHS, "--warmup", "0", "--no-telemetry",
               "--out", str(out), "--format", "json", *extra])
    cap = capsys.readouterr()
    assert rc == rc_want, cap.err
    return cap, out


def assert_every_request_azure(srv: AzureServer, version: str) -> None:
    """The query on every request (discovery, warm-up, probes), the key only as
    api-key, no /v1 anywhere."""
    assert srv.requests
    for q in srv.requests:
        assert f"api-version={version}" in q.query.split("&"), (q.method, q.path, q.query)
        assert q.headers.get("api-key") == KEY and "authorization" not in q.headers
        assert "/v1" not in q.path


# ------------------------------------------------ the handed input, end to end

def test_the_handed_deployment_url_sweeps_with_ttft_020_and_counts_from_usage(
        azure, no_keys, tmp_path, capsys):
    srv = azure()
    no_keys.setenv("OPENAI_API_KEY", KEY)
    cap, out = sweep(srv.deployment_url, tmp_path, capsys)  # exit 0 (was: 401 on every probe)
    d = json.loads(cap.out)
    assert d["probes"]["ok"] == 4 and d["probes"]["failed"] == 0 and d["fit"]["n"] >= 3
    records = read_run(out)[0]
    probes = [r for r in records if not r.warmup]
    assert len(probes) == 4
    for r in probes:
        # 0.20 s: the prompt-filter chunk at t = 0 is no token; a busy machine adds a little
        assert 0.19 < r.ttft_s <= 0.35, r.ttft_s
        assert r.prompt_tokens_source == "usage" and r.api == "chat" and r.model == "gpt-4o-mini"
    posts = [q for q in srv.requests if q.method == "POST"]
    assert posts and all(q.path == "/openai/deployments/gpt-4o-mini/chat/completions"
                         for q in posts)
    # counts from usage: the server's own count of each probe's prompt
    for r in records:
        assert r.prompt_tokens is not None and r.prompt_tokens > TEMPLATE_TOKENS
    assert all(q.json["model"] == "gpt-4o-mini" and "messages" in q.json for q in posts)
    assert_every_request_azure(srv, "2024-10-21")
    notes = " | ".join(d["live"]["notes"])
    assert "Azure OpenAI deployment (gpt-4o-mini, api-version 2024-10-21)" in notes
    written = cap.out + cap.err + out.read_text()
    assert KEY not in written and KEY[:12] not in written


async def test_a_probe_times_the_first_token_not_the_prompt_filter_chunk(azure):
    srv = azure()
    async with ProbeClient(srv.deployment_url, api_key=KEY, timeout=5) as c:
        info = await c.discover()
        await c.warm()
        r = await c.probe(64, prompt="one two three four five")
    assert r.ok, r.error_message
    assert 0.19 < r.ttft_s <= 0.35 and 0.0 <= r.ttfb_s < 0.15  # TTFB: the filter chunk
    assert r.prompt_tokens == 5 + TEMPLATE_TOKENS and r.prompt_tokens_source == "usage"
    assert info.model == c.model == "gpt-4o-mini" and c.api == "chat"
    assert c.endpoint == srv.base_url + "/openai/deployments/gpt-4o-mini/chat/completions"
    assert KEY not in repr(c) and KEY not in json.dumps(info.to_json())
    assert_every_request_azure(srv, "2024-10-21")


# ------------------------------------------------ the kind: names, versions, pasted endpoints

@pytest.mark.parametrize("name", ["prod-gpt4o", "my_deploy.v2", "GPT-35-Turbo-0125"])
async def test_any_deployment_name_is_the_model_and_the_path(azure, name):
    srv = azure(deployment=name, api_version="2025-01-01-preview")
    async with ProbeClient(srv.deployment_url, api_key=KEY, timeout=5) as c:
        await c.discover()
        r = await c.probe(16, prompt="a b c")
    assert r.ok and 0.19 < r.ttft_s <= 0.35, r.error_message
    assert c.model == name and r.model == name
    assert_every_request_azure(srv, "2025-01-01-preview")


async def test_the_endpoint_pasted_with_the_deployment_is_the_same_url(azure):
    srv = azure()
    url = f"{srv.base_url}/openai/deployments/gpt-4o-mini/chat/completions?api-version=2024-10-21"
    async with ProbeClient(url, api_key=KEY, timeout=5) as c:
        await c.discover()
        r = await c.probe(16, prompt="a b c")
    assert r.ok and 0.19 < r.ttft_s <= 0.35, r.error_message
    assert_every_request_azure(srv, "2024-10-21")


async def test_no_api_version_asks_for_the_ga_default_and_says_so(azure):
    srv = azure(api_version=AZURE_DEFAULT_API_VERSION)
    url = f"{srv.base_url}/openai/deployments/gpt-4o-mini"
    async with ProbeClient(url, api_key=KEY, timeout=5) as c:
        await c.discover()
        r = await c.probe(16, prompt="a b c")
    assert r.ok, r.error_message
    assert "api-version added" in c.notices and AZURE_DEFAULT_API_VERSION in c.notices[
        "api-version added"]
    assert_every_request_azure(srv, AZURE_DEFAULT_API_VERSION)


async def test_another_api_version_in_the_url_is_the_one_sent(azure):
    srv = azure(api_version="2024-06-01")
    url = srv.deployment_url
    async with ProbeClient(url, api_key=KEY, timeout=5) as c:
        await c.discover()
        r = await c.probe(16, prompt="a b c")
    assert r.ok, r.error_message
    assert "api-version added" not in c.notices
    assert_every_request_azure(srv, "2024-06-01")


async def test_an_unrecognized_argument_is_dropped_once_and_the_probe_stands(azure):
    """An older api-version that knows no stream_options: resent without it; with no
    usage chunk the lengths are the estimate, said."""
    srv = azure(known=KNOWN_FIELDS - {"stream_options"})
    async with ProbeClient(srv.deployment_url, api_key=KEY, timeout=5) as c:
        await c.discover()
        r = await c.probe(16, prompt="a b c")
        r2 = await c.probe(16, prompt="a b c d")
    assert r.ok and 0.19 < r.ttft_s <= 0.35, r.error_message
    assert r.notes.rejected_field.field == "stream_options"
    assert "Unrecognized request argument supplied: stream_options" in \
        r.notes.rejected_field.message
    assert r2.ok and r2.notes.rejected_field is None
    assert "sent without stream_options" in c.notices
    posts = [q for q in srv.requests if q.method == "POST"]
    assert sum("stream_options" in q.json for q in posts) == 1


async def test_without_the_key_the_401_says_so_and_no_probe_is_timed(azure):
    srv = azure()
    async with ProbeClient(srv.deployment_url, timeout=5) as c:
        await c.discover()
        r = await c.probe(16, prompt="a b c")
    assert not r.ok and r.http_status == 401 and r.ttft_s is None
    assert "Access denied due to invalid subscription key" in r.error_message


# ------------------------------------------------ the key: either variable, never shown

def test_the_key_in_azure_openai_api_key_only(azure, no_keys, tmp_path, capsys):
    srv = azure()
    no_keys.setenv("AZURE_OPENAI_API_KEY", KEY)
    cap, out = sweep(srv.deployment_url, tmp_path, capsys)
    d = json.loads(cap.out)
    assert d["probes"]["ok"] == 4
    assert_every_request_azure(srv, "2024-10-21")
    for text in (cap.out, cap.err, out.read_text()):
        assert KEY not in text and KEY[:12] not in text


def test_a_wrong_key_fails_with_the_server_words_and_never_the_key(azure, no_keys, tmp_path,
                                                                    capsys):
    srv = azure()
    wrong = "azkey-0000000000000000000000000000wrong"
    no_keys.setenv("OPENAI_API_KEY", wrong)
    cap, out = sweep(srv.deployment_url, tmp_path, capsys, rc_want=3)
    assert "Access denied" in cap.err
    for text in (cap.out, cap.err, out.read_text() if out.exists() else ""):
        assert wrong not in text and wrong[:12] not in text


def test_read_api_key_prefers_the_azure_variable_for_an_azure_url_only(no_keys):
    no_keys.setenv("OPENAI_API_KEY", "sk-openai-key-000000000")
    no_keys.setenv("AZURE_OPENAI_API_KEY", "azure-key-000000000000")
    opts = ProbeOptions()
    azure_url = "http://127.0.0.1:1/openai/deployments/d?api-version=2024-10-21"
    assert read_api_key(opts, azure_url) == "azure-key-000000000000"
    assert read_api_key(opts, "https://r.openai.azure.com/openai/v1") == "azure-key-000000000000"
    assert read_api_key(opts, "http://127.0.0.1:8000/v1") == "sk-openai-key-000000000"
    assert read_api_key(opts) == "sk-openai-key-000000000"
    # a variable named with --api-key-env is the only one read
    no_keys.setenv("MINE", "my-own-key-0000000")
    assert read_api_key(ProbeOptions(api_key_env="MINE"), azure_url) == "my-own-key-0000000"
    no_keys.delenv("AZURE_OPENAI_API_KEY")
    assert read_api_key(opts, azure_url) == "sk-openai-key-000000000"


async def test_the_api_key_header_never_goes_to_another_origin(fake_server):
    """A 307 of the probe's POST and a redirect of a GET to another origin: httpx drops
    only Authorization there; the api-key header is dropped too."""
    other = fake_server({"POST /openai/deployments/d/chat/completions": Reply.sse([
        (0.0, sse_text("Hi", finish="length")), (0.01, sse_done())]),
        "GET /openai/models": Reply.json({"data": []})})
    here = fake_server({
        "POST /openai/deployments/d/chat/completions": Reply(
            307, {"Location": other.base_url + "/openai/deployments/d/chat/completions"}),
        "GET /openai/models": Reply(302, {"Location": other.base_url + "/openai/models"})})
    url = here.base_url + "/openai/deployments/d?api-version=2024-10-21"
    async with ProbeClient(url, api_key=KEY, timeout=5) as c:
        await c.discover()
        r = await c.probe(8, prompt="a b")
    assert r.ok, r.error_message
    assert r.notes.redirected is not None and r.notes.redirected.key_sent is False
    assert other.requests and all("api-key" not in q.headers for q in other.requests)
    assert all(q.headers.get("api-key") == KEY for q in here.requests)


# ------------------------------------------------ the URL shapes, and query-carrying bases

def test_url_shapes():
    d = server_urls("https://r.openai.azure.com/openai/deployments/gpt-4o",
                    (("api-version", "2024-10-21"),))
    assert (d.root, d.v1, d.deployment, d.api_version, d.key_header) == (
        "https://r.openai.azure.com/openai/deployments/gpt-4o",
        "https://r.openai.azure.com/openai/deployments/gpt-4o", "gpt-4o", "2024-10-21",
        "api-key")
    assert d.models_url == "https://r.openai.azure.com/openai/models"
    assert d.params == (("api-version", "2024-10-21"),)
    # behind a gateway's own path prefix, with the endpoint pasted, a trailing slash
    g = server_urls("http://gw:8080/azure/openai/deployments/x/chat/completions/")
    assert g.v1 == "http://gw:8080/azure/openai/deployments/x" and g.deployment == "x"
    assert g.params == (("api-version", AZURE_DEFAULT_API_VERSION),)
    assert g.models_url == "http://gw:8080/azure/openai/models"
    # the resource's endpoint and a deployment named with --model (AzureOpenAI's
    # azure_endpoint + azure_deployment)
    r = server_urls("https://r.openai.azure.com", (("api-version", "2024-10-21"),), "dep1")
    assert r.v1 == "https://r.openai.azure.com/openai/deployments/dep1"
    none = server_urls("https://r.openai.azure.com/openai")
    assert none.deployment is None and "Azure resource URL" in dict(none.notices)
    # Azure's OpenAI-style v1 API: /v1 kept, the key as api-key
    v1 = server_urls("https://r.openai.azure.com/openai/v1/", (("api-version", "preview"),))
    assert (v1.root, v1.v1, v1.key_header, v1.deployment) == (
        "https://r.openai.azure.com/openai", "https://r.openai.azure.com/openai/v1",
        "api-key", None)
    # everything else as before: the API under /v1, Bearer, the query kept as given
    p = server_urls("http://h:8000/v1/", (("tenant", "a"),))
    assert (p.root, p.v1, p.key_header, p.params, p.notices) == (
        "http://h:8000", "http://h:8000/v1", "Authorization", (("tenant", "a"),), ())


async def test_a_query_carrying_openai_base_keeps_its_query_on_every_request(fake_server):
    """Not Azure: a gateway whose base URL carries its own parameter (``?tenant=``)."""
    def probe_reply(req):
        return Reply.sse([(0.05, sse_text("Hi", finish="length")),
                          (0.06, sse_data({"choices": [], "usage": {"prompt_tokens": 9}})),
                          (0.07, sse_done())])
    srv = fake_server({"GET /v1/models": Reply.json({"data": [{"id": "m"}]}),
                       "POST /v1/completions": probe_reply})
    async with ProbeClient(srv.base_url + "/v1?tenant=team-a", api_key=KEY, timeout=5) as c:
        await c.discover()
        await c.warm()
        r = await c.probe(8, prompt="a b")
    assert r.ok, r.error_message
    assert srv.requests and all("tenant=team-a" in q.query.split("&") for q in srv.requests)
    assert all(q.headers.get("authorization") == f"Bearer {KEY}" for q in srv.requests)
