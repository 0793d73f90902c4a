import pytest

from proxy.http.shared_state import stored_state


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"previous_response_id": "resp_1"}, "previous_response_id"),
        ({"conversation": "conv_1"}, "conversation"),
        ({"prompt": {"id": "pmpt_1"}}, "prompt"),
        ({"container": "container_1"}, "container"),
        ({"input": [{"id": "msg_1"}]}, "input[0]"),
        ({"input": [{"type": None, "id": "msg_1"}]}, "input[0]"),
        ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input[0]"),
        ({"input": [{"type": "input_file", "file_id": "file-1"}]}, "input[0]"),
        (
            {"messages": [{"role": "user", "content": [{"type": "file", "file": {"file_id": "f"}}]}]},
            "messages[0].content",
        ),
        (
            {
                "messages": [
                    {"role": "user", "content": [{"type": "image", "source": {"type": "file", "file_id": "f"}}]}
                ]
            },
            "messages[0].content",
        ),
        ({"tools": [{"type": "file_search", "vector_store_ids": ["vs_1"]}]}, "tools[0].vector_store_ids"),
        (
            {"tools": [{"type": "code_interpreter", "container": {"type": "auto", "file_ids": ["f"]}}]},
            "tools[0].container.file_ids",
        ),
        ({"images": [{"file_id": "file-1"}]}, "images[0]"),
        ({"mask": {"file_id": "file-1"}}, "mask"),
        ({"container": {"id": "container_1"}}, "container"),
        ({"container": {"skills": [{"type": "custom", "skill_id": "skill_1"}]}}, "container.skills"),
        ({"messages": [{"role": "assistant", "audio": {"id": "audio_1"}}]}, "messages[0].audio"),
    ],
)
def test_named_state(body, param):
    assert stored_state(body) == param


@pytest.mark.parametrize(
    "body",
    [
        {"previous_response_id": None, "conversation": "", "input": "hi"},
        {"prompt": "Say hi"},  # a legacy completion's prompt
        {
            "input": [
                {"role": "user", "content": "hi"},
                {"type": "message", "id": "msg_1", "role": "assistant", "content": []},
            ]
        },
        {"input": [{"type": "function_call_output", "call_id": "c", "output": "x"}]},
        {"tools": [{"type": "code_interpreter", "container": {"type": "auto"}}], "messages": "x"},
        {"input": [1, "x", None, {"type": "input_image", "image_url": "data:image/png;base64,AA=="}]},
        {"container": {"skills": [{"type": "anthropic", "skill_id": "pptx"}]}},
        {"messages": [{"role": "assistant", "audio": None}]},
        [],
        "x",
        None,
    ],
)
def test_no_state(body):
    assert stored_state(body) is None
