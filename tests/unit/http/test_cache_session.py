"""The size of a session's forwarded prefix, as keep-alive weighs it: the tools and the system
prompt a format keeps outside the history count too."""

from __future__ import annotations

from types import SimpleNamespace

from proxy.core.tokens import counter_for_model
from proxy.http.cache_session import _beside_history


def test_tools_and_a_system_prompt_outside_the_history_are_part_of_the_prefix():
    counter = counter_for_model("gpt-4o")
    system = "You are a careful coding agent. " * 500
    tools = [{"name": f"tool_{i}", "description": "does a thing " * 20, "input_schema": {"type": "object"}}
             for i in range(10)]
    messages = SimpleNamespace(body={"system": system, "tools": tools, "messages": []}, counter=counter)
    assert _beside_history(messages) == counter.text(system) + counter.tools(tools) > 3000
    blocks = SimpleNamespace(body={"system": [{"type": "text", "text": system}]}, counter=counter)
    assert _beside_history(blocks) == counter.text(system)
    responses = SimpleNamespace(body={"instructions": system, "input": "hi"}, counter=counter)
    assert _beside_history(responses) == counter.text(system)
    chat = SimpleNamespace(body={"messages": [{"role": "system", "content": system}]}, counter=counter)
    assert _beside_history(chat) == 0  # its system message is in the history, counted there
