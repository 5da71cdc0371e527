"""/v1/responses through the real server and the official openai client (`client.responses.create`
and its streaming helper), on SmolLM2-135M: the same text as /v1/chat/completions for the same
conversation, previous_response_id chaining, the store (GET, DELETE, store=false), the Responses
event sequence, function calls and their outputs, tool_choice, text.format json_schema,
max_output_tokens, and errors as OpenAI error objects."""
from __future__ import annotations

import json

import pytest

openai = pytest.importorskip("openai")
jsonschema = pytest.importorskip("jsonschema")

pytestmark = pytest.mark.slow

WEATHER = {"type": "function", "name": "get_weather", "description": "Current weather in a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 40}},
                          "required": ["city"]}}
CONVERT = {"type": "function", "name": "convert_currency", "description": "Convert an amount between currencies",
           "parameters": {"type": "object", "properties": {"amount": {"type": "number"},
                                                           "to": {"type": "string", "maxLength": 3}},
                          "required": ["amount", "to"]}}
GREEDY = {"temperature": 0.0}


@pytest.fixture(scope="module")
def server(smollm2_server):
    return smollm2_server


@pytest.fixture(scope="module")
def client(server):
    return server.openai()


def chat_text(client, messages, max_tokens):
    r = client.chat.completions.create(model="smol", messages=messages, max_tokens=max_tokens, **GREEDY)
    return r.choices[0].message.content, r.usage


def test_text_input_gives_the_chat_answer_and_usage(client):
    r = client.responses.create(model="smol", input="What is the capital of France?", instructions="Be brief.",
                                max_output_tokens=24, **GREEDY)
    text, usage = chat_text(client, [{"role": "system", "content": "Be brief."},
                                     {"role": "user", "content": "What is the capital of France?"}], 24)
    assert r.object == "response" and r.id.startswith("resp_") and r.model == "smol"
    assert r.output_text == text and r.output_text
    assert r.usage.input_tokens == usage.prompt_tokens and r.usage.output_tokens == usage.completion_tokens
    assert r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens
    assert r.status in ("completed", "incomplete")
    assert (r.status == "incomplete") == (r.usage.output_tokens == 24)


def test_message_list_input_with_parts(client):
    r = client.responses.create(model="smol", max_output_tokens=16, **GREEDY, input=[
        {"role": "developer", "content": "Answer in one word."},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Name a color."}]}])
    text, _ = chat_text(client, [{"role": "system", "content": "Answer in one word."},
                                 {"role": "user", "content": "Name a color."}], 16)
    assert r.output_text == text


def test_max_output_tokens_makes_it_incomplete(client):
    r = client.responses.create(model="smol", input="Tell me a long story about a dragon.", max_output_tokens=5,
                                **GREEDY)
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
    assert r.usage.output_tokens == 5 and [o.status for o in r.output] == ["incomplete"]


def test_previous_response_id_continues_the_conversation(client):
    first = client.responses.create(model="smol", input="My name is Ada. Say hello to me.", max_output_tokens=12,
                                    **GREEDY)
    second = client.responses.create(model="smol", input="What is my name?", previous_response_id=first.id,
                                     max_output_tokens=12, **GREEDY)
    text, usage = chat_text(client, [{"role": "user", "content": "My name is Ada. Say hello to me."},
                                     {"role": "assistant", "content": first.output_text},
                                     {"role": "user", "content": "What is my name?"}], 12)
    assert second.output_text == text
    assert second.usage.input_tokens == usage.prompt_tokens
    assert second.previous_response_id == first.id


def test_get_delete_and_store_false(client):
    r = client.responses.create(model="smol", input="Hi!", max_output_tokens=4, **GREEDY)
    got = client.responses.retrieve(r.id)
    assert got.id == r.id and got.output_text == r.output_text and got.usage == r.usage
    client.responses.delete(r.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(r.id)
    with pytest.raises(openai.NotFoundError) as e:
        client.responses.create(model="smol", input="Again", previous_response_id=r.id, max_output_tokens=4)
    assert e.value.body["param"] == "previous_response_id"
    unstored = client.responses.create(model="smol", input="Hi!", max_output_tokens=4, store=False, **GREEDY)
    assert unstored.output_text == r.output_text
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(unstored.id)


def test_stream_event_sequence_and_final_response(client):
    kw = dict(model="smol", input="Say hi", max_output_tokens=120, **GREEDY)
    whole = client.responses.create(**kw)
    assert whole.status == "completed"
    kinds, deltas, numbers = [], [], []
    with client.responses.stream(**kw) as stream:
        for event in stream:
            kinds.append(event.type)
            numbers.append(event.sequence_number)
            if event.type == "response.output_text.delta":
                deltas.append(event.delta)
        final = stream.get_final_response()
    assert numbers == list(range(len(numbers)))
    assert kinds[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added"]
    assert kinds[-4:] == ["response.output_text.done", "response.content_part.done", "response.output_item.done",
                          "response.completed"]
    assert set(kinds[4:-4]) == {"response.output_text.delta"}
    assert "".join(deltas) == final.output_text == whole.output_text
    assert final.usage.output_tokens == whole.usage.output_tokens
    assert client.responses.retrieve(final.id).output_text == final.output_text


def test_stream_cut_by_max_output_tokens_ends_incomplete(client):
    events = list(client.responses.create(model="smol", input="Tell me a story.", max_output_tokens=4, stream=True,
                                          **GREEDY))
    assert events[-1].type == "response.incomplete"
    assert events[-1].response.incomplete_details.reason == "max_output_tokens"
    assert [o.status for o in events[-1].response.output] == ["incomplete"]


def checked_calls(response) -> list:
    calls = [o for o in response.output if o.type == "function_call"]
    assert calls, response.output
    schemas = {t["name"]: t["parameters"] for t in (WEATHER, CONVERT)}
    for call in calls:
        assert call.call_id and call.id.startswith("fc_") and call.status == "completed"
        jsonschema.validate(json.loads(call.arguments), schemas[call.name])
    return calls


WEATHER_ASK = dict(model="smol", input="What's the weather in Paris?", tools=[WEATHER], tool_choice="required",
                   max_output_tokens=48, **GREEDY)


@pytest.fixture(scope="module")
def weather_call(client):
    """A forced call of get_weather (made once: constrained decoding is the slow part here)."""
    return client.responses.create(**WEATHER_ASK)


def test_required_tool_choice_gives_function_calls(client, weather_call):
    assert {c.name for c in checked_calls(weather_call)} == {"get_weather"}
    named = client.responses.create(model="smol", input="How many yen is 10 euros?", tools=[WEATHER, CONVERT],
                                    tool_choice={"type": "function", "name": "convert_currency"},
                                    max_output_tokens=48, **GREEDY)
    assert {c.name for c in checked_calls(named)} == {"convert_currency"}
    none = client.responses.create(model="smol", input="What's the weather in Paris?", tools=[WEATHER],
                                   tool_choice="none", max_output_tokens=8, **GREEDY)
    assert [o.type for o in none.output] == ["message"]


def test_streamed_function_call_matches_the_whole_one(client, weather_call):
    args = []
    with client.responses.stream(**WEATHER_ASK) as stream:
        for event in stream:
            if event.type == "response.function_call_arguments.delta":
                args.append(event.delta)
        final = stream.get_final_response()
    (want,), (got,) = checked_calls(weather_call), checked_calls(final)
    assert (got.name, got.arguments) == (want.name, want.arguments) == (got.name, "".join(args))


def test_function_call_output_round_trip(client, weather_call):
    (call,) = checked_calls(weather_call)[:1]
    result = {"type": "function_call_output", "call_id": call.call_id, "output": '{"temperature_c": 21}'}
    answer = client.responses.create(model="smol", tools=[WEATHER], previous_response_id=weather_call.id,
                                     max_output_tokens=12, **GREEDY, input=[result])
    assert answer.output and answer.usage.input_tokens > weather_call.usage.input_tokens
    # the same conversation given in full, without the store, is the same prompt
    again = client.responses.create(
        model="smol", tools=[WEATHER], max_output_tokens=12, store=False, **GREEDY,
        input=[{"role": "user", "content": "What's the weather in Paris?"},
               {"type": "function_call", "call_id": call.call_id, "name": call.name, "arguments": call.arguments},
               result])
    assert again.usage.input_tokens == answer.usage.input_tokens
    assert [o.type for o in again.output] == [o.type for o in answer.output]
    assert again.output_text == answer.output_text


def test_json_schema_text_format(client):
    schema = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 30},
                                               "population": {"type": "integer"}},
              "required": ["city", "population"], "additionalProperties": False}
    r = client.responses.create(model="smol", input="Give the largest city of Japan as JSON.", max_output_tokens=60,
                                text={"format": {"type": "json_schema", "name": "city", "schema": schema}}, **GREEDY)
    jsonschema.validate(json.loads(r.output_text), schema)
    assert r.text.format.type == "json_schema"


def test_sampler_extras_and_seed(client):
    kw = dict(model="smol", input="Write a word.", max_output_tokens=12, temperature=1.0, top_p=0.9,
              extra_body={"seed": 11, "top_k": 20, "min_p": 0.05, "repeat_penalty": 1.1})
    assert client.responses.create(**kw).output_text == client.responses.create(**kw).output_text


@pytest.mark.parametrize("body, param", [
    ({"input": "hi", "tools": [{"type": "web_search"}]}, "tools"),
    ({"input": "hi", "temperature": "0.7"}, "temperature"),
    ({"input": "hi", "max_output_tokens": 0}, "max_output_tokens"),
    ({"input": [{"type": "function_call_output", "output": "x"}]}, "input"),
    ({}, "input"),
])
def test_bad_requests_are_openai_400s(server, body, param):
    with server.client() as http:
        r = http.post("/v1/responses", json={"model": "smol", **body})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"].startswith(param), error


def test_grammar_with_text_format_is_refused(client):
    with pytest.raises(openai.BadRequestError, match="grammar or response_format"):
        client.responses.create(model="smol", input="hi", max_output_tokens=4, extra_body={"grammar": 'root ::= "a"'},
                                text={"format": {"type": "json_object"}})
