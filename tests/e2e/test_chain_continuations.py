"""Continuations found broken by the second attack review of response chains, now held: a
conversation keeps its carried output until the upstream takes it, chat bodies never continue a
Responses chain, a hidden reload call is answered even without tools offered, DELETE forgets the record."""

import httpx2

from tests.e2e.test_chain_attacks import HEADERS, A, carried, failing, follow, make_mixed
from tests.harness.requests import post
from tests.harness.servers import default_handler


def test_conversation_output_lost_when_the_continuation_fails(make_proxy, upstream):
    """A conversation's carried output is read once, before the upstream answers: a 500 (or a
    502/timeout, a client disconnect) on the next request loses it, and every retry then lacks the
    output of the injected call the conversation holds (the upstream refuses: no tool output)."""
    with make_proxy() as url:
        make_mixed(url, upstream, "resp_cf_1", conversation="conv_cf")
        upstream.handler = failing(500)
        r, sent = follow(url, upstream, conversation="conv_cf")
        assert r.status_code == 500 and carried(sent) == ["call_inj"]
        upstream.handler = default_handler
        r, sent = follow(url, upstream, conversation="conv_cf")  # the client's retry
        assert carried(sent) == ["call_inj"], "the retry lost the injected call's output"


def test_chat_body_gets_responses_items_from_a_chain(make_proxy, upstream):
    """_continue_chain runs for chat completions too: a chat body with a stray
    previous_response_id gets a Responses function_call_output (A's reloaded log) as messages[0]."""
    with make_proxy() as url:
        make_mixed(url, upstream, "resp_h_1")
        post(
            url,
            "/v1/chat/completions",
            body={
                "model": "gpt-4o",
                "messages": [{"role": "user", "content": "hi"}],
                "previous_response_id": "resp_h_1",
            },
            key=A,
            headers=HEADERS,
        )
        [sent] = upstream.chat_requests()
        assert sent.json()["messages"] == [{"role": "user", "content": "hi"}], sent.json()["messages"][0]["type"]


def test_chat_body_with_conversation_uses_up_the_record(make_proxy, upstream):
    with make_proxy() as url:
        make_mixed(url, upstream, "resp_h_2", conversation="conv_h")
        post(
            url,
            "/v1/chat/completions",
            body={"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}], "conversation": "conv_h"},
            key=A,
            headers=HEADERS,
        )
        r, sent = follow(url, upstream, conversation="conv_h")
        assert carried(sent) == ["call_inj"], "a chat request used up the conversation's record"


def test_injected_call_in_a_round_without_the_tools_is_hidden_and_never_answered(make_proxy, upstream):
    """The last round (budget spent: tools not offered) still has a context_reload call beside the
    client's (a model repeating an earlier call). The client gets its call only, but `unanswered`
    is set only `if self.offered`: nothing is carried, and the stored response keeps a call with
    no output (the real upstream then refuses the client's next request)."""
    from tests.e2e.test_chain_attacks import TOOLS, history
    from tests.harness.responses import answer, function_call, refs_in_input
    from tests.harness.servers import scripted

    def reload_only(rec):
        return answer(
            rec,
            function_call("context_reload", {"ref": refs_in_input(rec)[0]}, call_id="call_r", id="fc_r"),
            id="resp_u_1",
        )

    def mixed_round(rec):
        return answer(
            rec,
            function_call("read_logs", {}, call_id="call_client", id="fc_c"),
            function_call("context_reload", {"ref": "x"}, call_id="call_inj", id="fc_i"),
            id="resp_u_2",
        )

    with make_proxy() as url:
        upstream.handler = scripted(reload_only, mixed_round)
        r = post(
            url,
            "/v1/responses",
            body={"model": "gpt-5", "input": history(), "tools": TOOLS},
            key=A,
            headers={**HEADERS, "X-Offload-Max-Reload-Rounds": "1"},
        )
        assert [o.get("call_id") for o in r.json()["output"]] == ["call_client"]
        upstream.handler = default_handler
        r, sent = follow(url, upstream, previous_response_id="resp_u_1")
        assert sent["previous_response_id"] == "resp_u_2"
        assert carried(sent) == ["call_inj"], "call_inj of resp_u_2 has no output anywhere"


def test_delete_leaves_the_record(make_proxy, upstream):
    """Info: after DELETE of the first id (both upstream responses deleted) the record stays until
    its TTL: a later continuation is still rewritten to the deleted last id (the upstream's 404
    then names the hidden id) and the carried output (reloaded content) is still kept and sent."""
    with make_proxy() as url:
        make_mixed(url, upstream, "resp_e_1", last_id="resp_e_2")
        httpx2.delete(f"{url}/v1/responses/resp_e_1", headers={"authorization": f"Bearer {A}"})
        r, sent = follow(url, upstream, previous_response_id="resp_e_1")
        assert sent["previous_response_id"] == "resp_e_1" and carried(sent) == []
