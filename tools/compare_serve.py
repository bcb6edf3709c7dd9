#!/usr/bin/env python3
"""Sends the same requests to two running `tessera serve` servers and compares their answers byte for byte
(ids and creation times aside): for a change to the server that must not change what clients get.

  tools/compare_serve.py http://127.0.0.1:PORT_A http://127.0.0.1:PORT_B

The requests (Python's standard library, no client package): completions and chat, whole and streamed (with the
usage chunk), seeded sampling at high temperatures (so a model with a large vocabulary writes multi-byte
characters, some split across tokens), n = 2, logprobs, and stop strings. Exit code 1 when an answer differs.
"""

import json
import re
import sys
import urllib.request


def requests():
    out = []
    for stream in (False, True):
        for seed in range(6):
            completion = {
                "prompt": ["Once upon a time", "Café über naïve 日本語", "The river"][seed % 3],
                "max_tokens": 40,
                "temperature": 1.6,
                "seed": seed,
                "stream": stream,
                "n": 2,
                "logprobs": 2,
                "stop": ["the", "é"] if seed % 2 else [],
            }
            chat = {
                "messages": [{"role": "user", "content": f"Hi 日本 {seed}"}],
                "max_tokens": 30,
                "temperature": 1.3,
                "seed": seed,
                "stream": stream,
                "logprobs": True,
                "top_logprobs": 1,
            }
            if seed % 2:
                chat["stop"] = [" a", "."]
            if stream:
                completion["stream_options"] = {"include_usage": True}
            out += [("/v1/completions", completion), ("/v1/chat/completions", chat)]
        out.append(("/v1/completions", {"prompt": "Once upon a time", "max_tokens": 24, "stream": stream, "stop": "a"}))
    return out


def answer(base, path, body):
    request = urllib.request.Request(base + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    text = urllib.request.urlopen(request, timeout=300).read().decode()
    text = re.sub(r'"id": ?"[^"]*"', '"id":"X"', text)
    return re.sub(r'"created": ?\d+', '"created":0', text)


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    sent = requests()
    a, b = ([answer(base, path, body) for path, body in sent] for base in sys.argv[1:3])
    differ = [(request, x, y) for request, x, y in zip(sent, a, b) if x != y]
    for (path, body), x, y in differ:
        print(f"differs: {path} {json.dumps(body)}\n  {x[:400]}\n  {y[:400]}")
    events = sum(x.count("data: ") for x in a)
    non_ascii = sum(1 for x in a if "\\u" in x or any(ord(c) > 127 for c in x))
    print(f"{len(sent) - len(differ)} of {len(sent)} answers byte for byte the same ({events} SSE events; "
          f"{non_ascii} answers hold non-ASCII text)")
    sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()
