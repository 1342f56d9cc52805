"""Issue 25 end to end through the CLI (in process, against the fake server): what a
hostile server or a careless operator sends never crashes a command, never leaks a
secret, and is said plainly."""

from __future__ import annotations

from prefilltui.cli import main
from tests.fakeserver import Reply, sse_data, sse_done, sse_text


def complete(req):
    words = len(req.json["prompt"].split())
    return Reply.sse([(0.001, sse_text("x")),
                      (0.002, sse_data({"choices": [], "usage": {"prompt_tokens": words}})),
                      (0.003, sse_done())])


def test_a_model_list_over_the_cap_is_said_never_model_none(fake_server, tmp_path, capsys):
    """11: a model list too big to read says so; the summary never prints 'model None'."""
    many = {"data": [{"id": f"model-{i:07d}", "object": "model", "pad": "x" * 80}
                     for i in range(100_000)]}  # ~11 MB
    srv = fake_server({"GET /v1/models": Reply.json(many), "POST /v1/completions": complete})
    rc = main(["sweep", srv.base_url, "--lengths", "16,32,64", "--warmup", "0",
               "--no-telemetry", "--out", str(tmp_path / "r.jsonl")])
    out = capsys.readouterr().out
    assert rc == 0
    assert "model None" not in out
    assert "model ?" in out and "/v1/models answered over 8 MiB: not read" in out
