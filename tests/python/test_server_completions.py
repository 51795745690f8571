"""/v1/completions, /v1/models, /health and /metrics through the official openai SDK against
`orchid serve synthetic:tiny`. The model's tokens are random: these tests check the protocol (shapes, counts,
limits), not the text."""
import pytest

from orchid_server import OrchidServer, openai_client


@pytest.fixture(scope="module")
def server():
    with OrchidServer("synthetic:tiny", "--max-model-len", "512", "--served-model-name", "tiny") as s:
        yield s


@pytest.fixture(scope="module")
def client(server):
    return openai_client(server)


def test_models_and_health(server, client):
    models = client.models.list()
    assert [m.id for m in models.data] == ["tiny"]
    assert client.models.retrieve("tiny").id == "tiny"
    assert server.get("/health")[0] == 200


def test_completion_lengths_and_usage(client):
    r = client.completions.create(model="tiny", prompt="Once upon a time", max_tokens=7,
                                  extra_body={"ignore_eos": True})
    assert r.object == "text_completion" and r.id.startswith("cmpl-")
    assert len(r.choices) == 1 and r.choices[0].finish_reason == "length"
    assert r.usage.prompt_tokens == 4 and r.usage.completion_tokens == 7
    assert r.usage.total_tokens == 11


def test_completion_n_and_token_prompts(client):
    r = client.completions.create(model="tiny", prompt=[[1, 2, 3], [4, 5]], n=2, max_tokens=3,
                                  extra_body={"ignore_eos": True})
    assert sorted(c.index for c in r.choices) == [0, 1, 2, 3]
    assert r.usage.prompt_tokens == 5 and r.usage.completion_tokens == 12


def test_completion_stream_adds_up(client):
    stream = client.completions.create(model="tiny", prompt="Hello", max_tokens=9, stream=True,
                                       stream_options={"include_usage": True}, seed=3,
                                       extra_body={"ignore_eos": True})
    text, finish, usage = "", None, None
    for chunk in stream:
        if chunk.usage:
            usage = chunk.usage
        for c in chunk.choices:
            text += c.text
            finish = c.finish_reason or finish
    assert finish == "length" and usage.completion_tokens == 9
    # The same seed without streaming gives the same text.
    r = client.completions.create(model="tiny", prompt="Hello", max_tokens=9, seed=3, extra_body={"ignore_eos": True})
    assert r.choices[0].text == text


def test_completion_logprobs_and_echo(client):
    r = client.completions.create(model="tiny", prompt="abc", max_tokens=4, logprobs=2,
                                  extra_body={"ignore_eos": True})
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == 4
    assert all(v <= 0 for v in lp.token_logprobs)
    assert all(len(t) <= 2 for t in lp.top_logprobs)
    e = client.completions.create(model="tiny", prompt="abc", max_tokens=2, echo=True, extra_body={"ignore_eos": True})
    assert e.choices[0].text.startswith("abc")


def test_metrics_count_the_work(server, client):
    before = server.wait_idle()  # the last step of an earlier request may not be counted yet
    client.completions.create(model="tiny", prompt="count me", max_tokens=5, extra_body={"ignore_eos": True})
    after = server.wait_idle()
    assert after["orchid_generation_tokens_total"] - before["orchid_generation_tokens_total"] == 5
    assert after["orchid_requests_finished_total"] - before["orchid_requests_finished_total"] == 1
    assert after["orchid_kv_full_pages_used"] == 0


def test_prompt_longer_than_the_context_is_400_with_numbers(client):
    import openai
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model="tiny", prompt=[1] * 600, max_tokens=1)
    assert "512" in str(e.value) and "600" in str(e.value)
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model="tiny", prompt=[1] * 500, max_tokens=20)
    assert "520" in str(e.value)
