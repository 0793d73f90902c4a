"""What a request sends beside its history (keep-alive weighs a session's prefix by it, the
clearing edits count it as fixed): the tools and a system prompt kept outside the history."""

from __future__ import annotations

from proxy.core.tokens import counter_for_model


def test_tools_and_a_system_prompt_outside_the_history_are_counted():
    counter = counter_for_model("gpt-4o")
    system = "You are a careful coding agent. " * 500
    tools = [
        {"name": f"tool_{i}", "description": "does a thing " * 20, "input_schema": {"type": "object"}}
        for i in range(10)
    ]
    messages = {"system": system, "tools": tools, "messages": []}
    assert counter.outside_history(messages) == counter.text(system) + counter.tools(tools) > 3000
    assert counter.outside_history({"system": [{"type": "text", "text": system}]}) == counter.text(system)
    assert counter.outside_history({"instructions": system, "input": "hi"}) == counter.text(system)
    chat = {"messages": [{"role": "system", "content": system}]}
    assert counter.outside_history(chat) == 0  # its system message is in the history, counted there
