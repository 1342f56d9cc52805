"""SSE framing and chunk classification, without sockets."""

from prefilltui.measure.sse import SSEStreamDecoder, classify_chunk


def feed_all(parts):
    d = SSEStreamDecoder()
    return [[(e.event, e.data, e.id) for e in d.feed(p)] for p in parts]


def test_split_reads_complete_event_on_second_read():
    out = feed_all([b'data: {"choices":[{"text":"Hel', b'lo"}]}\n\ndata: {"choices":[{"text":" world"}]}\n\ndata: [DO',
                    b"NE]\n\n"])
    assert out[0] == []
    assert [e[1] for e in out[1]] == ['{"choices":[{"text":"Hello"}]}', '{"choices":[{"text":" world"}]}']
    assert [e[1] for e in out[2]] == ["[DONE]"]


def test_comments_retry_id_blocks():
    out = feed_all([b":\n\n", b"retry: 3000\n\n", b"id: 7\ndata: ok\n\n", b": ping\n\n", b"data: !\n\n",
                    b"data: [DONE]\n\n"])
    assert out == [[], [], [("message", "ok", "7")], [], [("message", "!", "7")], [("message", "[DONE]", "7")]]


def test_multiline_data_crlf_bom_and_utf8_split():
    d = SSEStreamDecoder()
    assert d.feed(b"\xef\xbb\xbfdata: a\r\ndata: b\r\n\r\n")[0].data == "a\nb"
    snow = "\u2603".encode()
    assert d.feed(b"data: " + snow[:1]) == []
    assert d.feed(snow[1:] + b"\n\n")[0].data == "\u2603"


def test_several_events_per_read_and_event_type():
    d = SSEStreamDecoder()
    evs = d.feed(b"event: error\ndata: {\"error\":\"x\"}\n\ndata: 1\n\ndata: 2\n\n")
    assert [(e.event, e.data) for e in evs] == [("error", '{"error":"x"}'), ("message", "1"), ("message", "2")]


def test_incomplete_last_event_is_discarded():
    d = SSEStreamDecoder()
    assert d.feed(b"data: half") == []
    assert d.close() == []


def test_classify_channels():
    assert classify_chunk({"choices": [{"text": "x"}]}).has_token
    assert not classify_chunk({"choices": [{"text": ""}]}).has_token
    assert not classify_chunk({"choices": [{"delta": {"role": "assistant"}}]}).has_token
    assert not classify_chunk({"choices": [{"delta": {"role": "assistant", "content": ""}}]}).has_token
    assert classify_chunk({"choices": [{"delta": {"content": "x"}}]}).has_token
    assert classify_chunk({"choices": [{"delta": {"reasoning_content": "x"}}]}).has_token
    assert classify_chunk({"choices": [{"delta": {"reasoning": "x"}}]}).has_token
    assert classify_chunk({"choices": [{"delta": {"tool_calls": [{"index": 0}]}}]}).has_token
    assert not classify_chunk({"choices": [{"delta": {"tool_calls": []}}]}).has_token
    u = classify_chunk({"choices": [], "usage": {"prompt_tokens": 12}})
    assert not u.has_token and u.usage == {"prompt_tokens": 12}
    assert not classify_chunk({"usage": {"prompt_tokens": 1}}).has_token
    e = classify_chunk({"error": {"message": "engine failure", "code": 500}})
    assert e.error == "engine failure"
