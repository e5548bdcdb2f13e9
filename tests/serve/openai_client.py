"""etch serve through PyPI's openai client: a completion and a chat, whole and streamed, equal to the
answers etch run gave (the same references as openai_client.mjs), and the API key enforced.
usage: python openai_client.py MAIN_PORT KEYED_PORT WORK_DIR"""
import json
import sys

import openai

main_port, key_port, work = sys.argv[1], sys.argv[2], sys.argv[3]
ref_completion = json.load(open(f"{work}/ref-completion.json"))
ref_chat = json.load(open(f"{work}/ref-chat.json"))
client = openai.OpenAI(base_url=f"http://127.0.0.1:{main_port}/v1", api_key="none", max_retries=0)
passed = failed = 0


def check(ok, what):
    global passed, failed
    if ok:
        passed += 1
    else:
        failed += 1
        print("FAIL:", what)


c = client.completions.create(model="stories", prompt="Once upon a time", max_tokens=60)
check(c.choices[0].text == ref_completion["text"], "completion text")
check(c.usage.prompt_tokens == 5 and c.usage.completion_tokens == 60, f"usage {c.usage}")
streamed = "".join(ch.choices[0].text for ch in client.completions.create(
    model="stories", prompt="Once upon a time", max_tokens=60, stream=True))
check(streamed == ref_completion["text"], "streamed completion")
messages = [{"role": "system", "content": "You tell stories."}, {"role": "user", "content": "Tell me about a cat."}]
r = client.chat.completions.create(model="stories", messages=messages, max_tokens=40)
check(r.choices[0].message.content == ref_chat["text"], "chat text")
chat = "".join(ch.choices[0].delta.content or "" for ch in client.chat.completions.create(
    model="stories", messages=messages, max_tokens=40, stream=True) if ch.choices)
check(chat == ref_chat["text"], "streamed chat")
s = client.completions.create(model="stories", prompt="Once upon a time", max_tokens=60, stop=["Lily"])
check(s.choices[0].text == ", there was a little girl named " and s.choices[0].finish_reason == "stop", "stop")
try:
    openai.OpenAI(base_url=f"http://127.0.0.1:{key_port}/v1", api_key="wrong", max_retries=0).models.list()
    check(False, "a wrong key is refused")
except openai.AuthenticationError:
    check(True, "401")
keyed = openai.OpenAI(base_url=f"http://127.0.0.1:{key_port}/v1", api_key="sekret", max_retries=0)
check(keyed.completions.create(model="s", prompt="Once", max_tokens=3).usage.completion_tokens == 3, "with the key")
print(f"python openai client {openai.__version__}: {passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
