"""`replay --live`'s measures: the next action read from each format's answer, and the
similarities of two of them."""

from __future__ import annotations

import difflib
import json

import pytest

from proxy.replay._live_report import (
    Action,
    AnswerError,
    Call,
    action_of,
    arguments_similarity,
    compare,
    flattened,
    text_similarity,
)


def chat(content=None, *, calls=(), finish="stop"):
    message = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = [
            {"id": f"c{i}", "type": "function", "function": {"name": n, "arguments": a}}
            for i, (n, a) in enumerate(calls)
        ]
    return {"choices": [{"index": 0, "message": message, "finish_reason": finish}]}


def test_a_chat_completion():
    action = action_of(chat("Looking.", calls=[("bash", '{"cmd": "ls"}')], finish="tool_calls"), "chat")
    assert action == Action((Call("bash", '{"cmd": "ls"}'),), "Looking.", "tool_calls")
    assert action_of(chat([{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]), "chat").text == "a\nb"


def test_a_responses_response():
    answer = {
        "status": "completed",
        "output": [
            {"type": "reasoning", "summary": []},
            {"type": "message", "content": [{"type": "output_text", "text": "Reading."}]},
            {"type": "function_call", "name": "read", "arguments": '{"path": "a.py"}', "call_id": "x"},
        ],
    }
    assert action_of(answer, "responses") == Action((Call("read", '{"path": "a.py"}'),), "Reading.", "function_call")
    cut = {"status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"}, "output": []}
    assert action_of(cut, "responses").finish == "max_output_tokens"


def test_an_anthropic_message():
    answer = {
        "content": [
            {"type": "text", "text": "On it."},
            {"type": "tool_use", "id": "t", "name": "bash", "input": {"b": 1, "a": "x"}},
        ],
        "stop_reason": "tool_use",
    }
    action = action_of(answer, "anthropic")
    assert action.calls[0].name == "bash" and json.loads(action.calls[0].arguments) == {"a": "x", "b": 1}
    assert (action.text, action.finish) == ("On it.", "tool_use")


@pytest.mark.parametrize("tool_calls", [5, "abc", {"a": 1}, [1, None, {"function": 3}]])
def test_tool_calls_of_the_wrong_type_are_no_calls(tool_calls):
    answer = {"choices": [{"message": {"content": "x", "tool_calls": tool_calls}, "finish_reason": "stop"}]}
    assert action_of(answer, "chat") == Action((), "x", "stop")


@pytest.mark.parametrize(
    "answer, format",
    [
        ([], "chat"),
        ({"choices": []}, "chat"),
        ({"choices": [{}]}, "chat"),
        ({"output": "x"}, "responses"),
        ({"content": None}, "anthropic"),
        ("text", "anthropic"),
    ],
)
def test_an_answer_without_a_next_action_is_an_error(answer, format):
    with pytest.raises(AnswerError):
        action_of(answer, format)


def test_an_action_survives_the_journal():
    action = Action((Call("a", "{}"), Call("b", '{"x": 1}')), "hi", "tool_calls")
    assert Action.from_dict(json.loads(json.dumps(action.as_dict()))) == action


def test_flattened_json_is_paths_and_normalised_values():
    assert flattened({"a": {"b": [1, "x  y\n"]}, "c": True, "d": [], "e": {}}) == {
        ("$.a.b[0]", "1"),
        ("$.a.b[1]", "x y"),
        ("$.c", "true"),
        ("$.d", "[]"),
        ("$.e", "{}"),
    }


def test_argument_similarity():
    assert arguments_similarity('{"a": 1, "b": "x"}', '{"b": "x",\n "a": 1}') == 1.0  # order and spacing do not count
    assert arguments_similarity('{"a": 1, "b": "x"}', '{"a": 1, "b": "y"}') == pytest.approx(1 / 3)  # 1 of 3 pairs
    assert arguments_similarity('{"a": 1}', '{"c": 2}') == 0.0
    assert arguments_similarity("{}", "{}") == 1.0
    # not JSON: compared as text
    assert arguments_similarity("ls -la", "ls -l") == pytest.approx(
        difflib.SequenceMatcher(None, "ls -la", "ls -l").ratio()
    )


def test_text_similarity_is_difflibs_ratio_whitespace_collapsed():
    assert text_similarity("", "") == 1.0 and text_similarity("a  b\n", "a b") == 1.0
    assert text_similarity("abcd", "abce") == pytest.approx(0.75)
    assert text_similarity("abc", "") == 0.0


def test_compare_pairs_calls_by_position():
    one = Action((Call("read", '{"p": "a"}'),), "", "tool_calls")
    two = Action((Call("read", '{"p": "a"}'), Call("bash", '{"cmd": "ls"}')), "", "tool_calls")
    c = compare(one, two)
    assert not c.same_tools and c.argument_similarity == 0.5 and c.text_similarity is None and c.same_finish
    assert not c.agree


def test_agreement_is_the_same_tools_arguments_and_finish_not_the_text():
    a = Action((Call("read", '{"p": "a"}'),), "Reading a.", "tool_calls")
    assert compare(a, Action(a.calls, "Let me read a.", "tool_calls")).agree
    assert not compare(a, Action((Call("read", '{"p": "b"}'),), a.text, "tool_calls")).agree
    assert not compare(a, Action(a.calls, a.text, "length")).agree
    text_only = compare(Action((), "Done.", "stop"), Action((), "Finished.", "stop"))
    assert text_only.agree and text_only.argument_similarity is None and text_only.same_tools
    assert compare(Action((), "Done.", "stop"), a).as_dict() == {
        "same_tools": False,
        "argument_similarity": 0.0,
        "text_similarity": round(text_similarity("Done.", "Reading a."), 4),
        "same_finish": False,
        "agree": False,
    }
