#!/usr/bin/env python3
"""Writes the seed corpora of tests/fuzz/corpus/ (run from anywhere; rewrites the seed_* files).

Seeds are small valid and nearly valid inputs in each target's input format, so the fuzzer
starts from the shapes the code expects. What the fuzzer adds goes to build-fuzz/, not here;
inputs worth keeping (a finding, a new shape) are copied into corpus/ or regressions/ by hand.
"""
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def write(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, "seed_" + name), "wb") as f:
        f.write(data)


def read(path):
    with open(os.path.join(ROOT, path), "rb") as f:
        return f.read()


# ---- gateway_config: YAML text ----
for f in ["config/example.yaml", "config/local.yaml", "config/local-llama.yaml"]:
    write("gateway_config", os.path.basename(f), read(f))
write("gateway_config", "minimal", "models:\n  - name: m\n    endpoints: [\"http://127.0.0.1:7001\"]\n")
write("gateway_config", "registration",
      "registration:\n  token_env: T\n  allowed_urls: [\"https://*.acu.run\"]\n"
      "models:\n  - name: m\n    slots: 2\n    endpoints:\n      - {url: \"https://a.acu.run\", slots: 1}\n")
write("gateway_config", "flow_nesting", "models: " + "[" * 33 + "]" * 33 + "\n")
write("gateway_config", "block_nesting", "".join("  " * i + "a:\n" for i in range(34)))
write("gateway_config", "alias", "x: &a {name: m}\nmodels: [*a]\n")
write("gateway_config", "two_docs", "models: []\n---\nmodels: []\n")

# ---- agent_config: YAML text ----
write("agent_config", "agent.example.yaml", read("replica-agent/agent.example.yaml"))
write("agent_config", "minimal", "model: m\nengine:\n  kind: sim\n")
write("agent_config", "nesting", "model: " + "{a: " * 40 + "}" * 40 + "\n")

# ---- openai_inspect: Content-Type line, then the body ----
chat = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
write("openai_inspect", "chat", "application/json\n" + json.dumps(chat))
write("openai_inspect", "stream", "application/json; charset=utf-8\n" +
      json.dumps(dict(chat, stream=True, stream_options={"include_usage": False})))
write("openai_inspect", "nulls", "Application/JSON\n" +
      json.dumps(dict(chat, stream=None, stream_options=None)))
write("openai_inspect", "bad_types", "application/json\n{\"model\":1,\"stream\":\"yes\"}")
write("openai_inspect", "deep", "application/json\n{\"model\":\"m\",\"x\":" + "[" * 130 + "]" * 130 + "}")
write("openai_inspect", "text", "text/plain\nhello")
write("openai_inspect", "escapes", "application/json\n{\"model\":\"\\u00e9\\ud83d\\ude00\",\"stream\":true}")
# The one-pass scan's cases: a BOM, prompt blocks (chat parts, completions), repeated keys, the
# splice places, numbers that overflow a double, UTF-8 at the edges.
write("openai_inspect", "bom_prompt", "application/json\n\ufeff" +
      json.dumps({"model": "m", "prompt": ["a" * 200, 1, "b"], "stream_options": {}}))
write("openai_inspect", "parts", "application/json\n" + json.dumps({"model": "m", "messages": [
    {"content": [{"text": "x" * 150}, {"type": "image_url", "text": "no"}, {"text": "y", "type": "text"}],
     "role": "user"}, None, {"role": "assistant"}]}))
write("openai_inspect", "repeats", "application/json\n{\"model\":\"a\",\"messages\":[],\"model\":\"b\",\"messages\":[{\"content\":\"c\"}]}")
write("openai_inspect", "numbers", "application/json\n{\"model\":\"m\",\"n\":[1e308,1e309,-0,0.5e-400,123456789012345678901234567890]}")
write("openai_inspect", "utf8", b'application/json\n{"model":"m","t":"\xed\x9f\xbf \xf4\x8f\xbf\xbf \xe0\xa0\x80"}')


# ---- sse_relay: strip flag, u16 event limit, cut count, cuts, then the stream ----
def sse(strip, limit, cuts, stream):
    return bytes([strip]) + struct.pack(">H", limit) + bytes([len(cuts)]) + bytes(cuts) + stream


chunk = b'data: {"choices":[{"delta":{"content":"hi"}}],"usage":null}\n\n'
usage = b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":1}}\n\n'
done = b"data: [DONE]\n\n"
write("sse_relay", "plain", sse(0, 4000, [5, 17, 1, 1, 40], chunk + chunk + done))
write("sse_relay", "strip", sse(1, 4000, [3, 60, 2], chunk + usage + done))
write("sse_relay", "crlf", sse(1, 4000, [7, 1, 1], chunk.replace(b"\n", b"\r\n") + usage.replace(b"\n", b"\r")))
write("sse_relay", "fields", sse(0, 500, [9, 9, 9], b": keep-alive\n\nevent: x\nid: 7\ndata: a\ndata:b\nretry: 3\n\n"))
write("sse_relay", "overflow", sse(0, 16, [4], b"data: 0123456789abcdef0123\n\n" + done))
write("sse_relay", "unterminated", sse(1, 100, [], b"data: {\"usage\":null}"))

# ---- http_request: u16 header limit, u16 body limit, cut count, cuts, then the bytes ----
def http(header_limit, body_limit, cuts, data):
    return struct.pack(">HH", header_limit, body_limit) + bytes([len(cuts)]) + bytes(cuts) + data


get = b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n"
post = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: 13\r\n\r\n{\"model\":\"m\"}")
chunked = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
           b"Expect: 100-continue\r\n\r\n5\r\nhello\r\n0\r\n\r\n")
write("http_request", "get", http(8192, 1024, [3, 10], get))
write("http_request", "post", http(8192, 1024, [30, 30, 1], post))
write("http_request", "pipelined", http(8192, 1024, [50, 2, 2], get + post + chunked))
write("http_request", "chunked", http(8192, 4, [11, 60], chunked))
write("http_request", "too_long", http(8192, 5, [], post))
write("http_request", "header_limit", http(20, 1024, [7], get))
write("http_request", "cut", http(8192, 1024, [9], post[:-4]))
write("http_request", "garbage", http(8192, 1024, [1], b"\x16\x03\x01\x02\x00 not http\r\n\r\n"))

# ---- registration: the JSON body ----
write("registration", "full", json.dumps({"url": "https://a1.acu.run/", "model": "m", "slots": 2,
                                          "agent_version": "0.1.0",
                                          "device": {"soc": "sd8", "ram_mb": 8192}}))
write("registration", "local", json.dumps({"url": "http://127.0.0.1:7001", "model": "m"}))
write("registration", "ipv6", json.dumps({"url": "http://[::1]:7101", "model": "n", "slots": None}))
write("registration", "userinfo", json.dumps({"url": "https://u:p@a.acu.run", "model": "m"}))
write("registration", "bad_slots", json.dumps({"url": "https://a.acu.run", "model": "m", "slots": 0}))
write("registration", "deep", "{\"url\":" + "[" * 200 + "]" * 200 + "}")
write("registration", "not_object", "[1,2]")

# ---- answer_stats: a flags byte (API = byte % 3, stats filled first when byte & 4), the body ----
for name, flags, body in [
        ("llama_openai", 0, '{"choices":[{"message":{"content":"hi"}}],"usage":{"completion_tokens":16,'
         '"prompt_tokens":12,"total_tokens":28,"prompt_tokens_details":{"cached_tokens":0}},'
         '"timings":{"cache_n":0,"prompt_n":12,"prompt_ms":8.31,"predicted_n":16,"predicted_ms":402.114}}'),
        ("responses", 1, '{"id":"r","usage":{"input_tokens":120,"input_tokens_details":{"cached_tokens":100},'
         '"output_tokens":7}}'),
        ("anthropic", 2 | 4, '{"usage":{"input_tokens":20,"cache_read_input_tokens":100,'
         '"cache_creation_input_tokens":5,"output_tokens":4}}'),
        ("repeated", 4, '{"usage":{"prompt_tokens":1,"prompt_tokens":"x"},"timings":{"prompt_ms":1,"prompt_ms":-0.0}}'),
        ("numbers", 0, '{"usage":{"prompt_tokens":18446744073709551616,"completion_tokens":-0},'
         '"timings":{"prompt_ms":1e400,"predicted_ms":2E-2,"predicted_n":1.0}}'),
        ("escapes", 0, '{"usage":{"prompt_tokens":2,"x":"caf\\u00e9","y":"\u00e9"}}'),
        ("nested", 0, '{"usage":{"prompt_tokens":2,"x":' + "[" * 20 + "]" * 20 + '}}'),
]:
    write("answer_stats", name, bytes([flags]) + body.encode("utf-8", "surrogateescape"))

# ---- url_glob: the pattern line, then the URL ----
for name, pattern, url in [
        ("suffix", "https://*.acu.run", "https://a1b2.acu.run"),
        ("cross_path", "https://*.acu.run", "https://evil.com/x.acu.run"),
        ("cross_userinfo", "https://*.acu.run", "https://evil.com:1@x.acu.run"),
        ("port", "http://127.0.0.1:*", "http://127.0.0.1:7001/prefix/"),
        ("ipv6", "http://[::1]:7?01", "http://[::1]:7101"),
        ("upper", "https://*", "HTTPS://A.Acu.Run:443/"),
        ("stars", "h*t*p*s*:*/*/*", "https://x/y/z"),
]:
    write("url_glob", name, pattern + "\n" + url)
