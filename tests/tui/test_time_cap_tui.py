"""The live TUI's sweep has the headless sweep's time cap: one rule, one budget
(``measure.sweep.TIME_CAP_S``), said once on the status line and in a notification;
``+`` widens past it (the user's choice)."""


from prefilltui.cli import build_parser
from prefilltui.commands.common import load_options, session_options
from prefilltui.commands.watch import display_options, make_watch_app
from tests.fakeserver import models_reply, per_token_completion
from tests.tui.test_load_tui import _until

NOTE = "over the longest prompt expected within 0.3 s a probe"


#: 1 ms a prompt token (a CPU target): the 4,007-token probe would take 4 s.
_slow = per_token_completion()


async def test_the_live_sweep_is_capped_by_time_until_plus(fake_server, tmp_path, monkeypatch):
    """`prefilltui URL` (no --lengths) against a 4,096-token context at 1 ms a token,
    under a 0.3-s cap (5 s by default): no probe is sent over the cap (the TUI sent a
    4,009-token probe of 27 s on a CPU), the range reads "4–N tok (time cap)" and the
    note is notified once over several rounds; ``+`` then probes twice that."""
    import prefilltui.session as session_mod
    monkeypatch.setattr(session_mod, "TIME_CAP_S", 0.3)
    srv = fake_server({"GET /v1/models": models_reply("m", max_model_len=4096),
                       "POST /v1/completions": _slow})
    args = build_parser().parse_args(
        ["watch", srv.base_url, "--no-telemetry", "--out", str(tmp_path / "run.jsonl"),
         "--warmup", "0", "--timeout", "10", "--pause", "0", "--duty", "1", "--seed", "2"])
    app, session = make_watch_app(session_options(args, load=load_options(args)),
                                  display_options(args), srv.base_url)
    try:
        async with app.run_test(size=(160, 40)) as pilot:
            assert await _until(lambda: session.runner is not None)
            runner = session.runner
            assert await _until(lambda: runner.cap_note == "time cap")
            cap = max(runner.lengths)
            assert 87 < cap < 406
            done = len(app.results)
            # two more rounds of the capped lengths (7 a round)
            assert await _until(lambda: len(app.results) >= done + 14)
            sent = [r.requested_tokens for r in app.results]
            assert max(sent) == cap and max(r.ttft_s for r in app.results) < 0.3 * 1.5
            app.flush()
            status = str(app.query_one("#status").render())
            assert f"4–{cap} tok (time cap)" in status
            said = [n.message for n in app._notifications if NOTE in n.message]
            assert len(said) == 1 and f"capped to {cap} tokens" in said[0]
            assert said[0].startswith("lengths 406, 878, 1896, 4007 are over")
            await pilot.press("plus")
            wide = 2 * cap
            assert await _until(lambda: any(r.requested_tokens == wide for r in app.results))
            app.flush()
            await pilot.pause()
            status = str(app.query_one("#status").render())
            assert f"4–{wide} tok" in status and "cap)" not in status
            assert runner.cap_note is None
    finally:
        session.close()
