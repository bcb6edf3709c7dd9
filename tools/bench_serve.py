#!/usr/bin/env python3
"""Throughput of a running `tessera serve` (or any OpenAI-compatible server) at
several concurrencies: time to first token, inter-token latency and total
generated tokens/s. Each level runs `concurrency x rounds` streamed completions,
`concurrency` at a time (one thread each); every prompt starts with its own
number, so no two share a cached prefix. Python's standard library only (the GPU
machine has no node), so it runs wherever python3 does.

  tools/bench_serve.py --base http://127.0.0.1:8000 [--concurrency 1,8,32,64]
                       [--rounds 2] [--prompt-words 128] [--max-tokens 64]

tools/bench_serve.sh starts the server, runs this and stops it.
"""
import argparse
import http.client
import json
import threading
import time
import urllib.parse

WORDS = "the river ran past the old mill and under the stone bridge toward the sea".split()


def prompt(i, words):
    return f"{i}. " + " ".join(WORDS[k % len(WORDS)] for k in range(words))


def one(base, i, o):
    """One streamed completion: (ttft ms, [inter-token gaps ms], completion tokens)."""
    url = urllib.parse.urlsplit(base)
    body = json.dumps({"model": "bench", "prompt": prompt(i, o.prompt_words), "max_tokens": o.max_tokens,
                       "temperature": 0, "stream": True, "stream_options": {"include_usage": True}})
    connection = http.client.HTTPConnection(url.hostname, url.port, timeout=600)
    start = time.perf_counter()
    connection.request("POST", "/v1/completions", body, {"Content-Type": "application/json",
                                                          "Authorization": f"Bearer {o.api_key}"})
    response = connection.getresponse()
    if response.status != 200:
        raise RuntimeError(f"request {i}: HTTP {response.status}: {response.read()[:300]!r}")
    first = last = None
    gaps, tokens = [], 0
    for line in response:  # Server-Sent Events: one `data: {...}` line per chunk
        line = line.strip()
        if not line.startswith(b"data: ") or line == b"data: [DONE]":
            continue
        chunk = json.loads(line[6:])
        if "error" in chunk:
            raise RuntimeError(f"request {i}: {chunk['error']}")
        if chunk.get("usage"):
            tokens = chunk["usage"]["completion_tokens"]
        if not chunk["choices"] or not chunk["choices"][0].get("text"):
            continue
        now = time.perf_counter()
        if first is None:
            first = now
        else:
            gaps.append((now - last) * 1000)
        last = now
    connection.close()
    return ((first - start) * 1000 if first is not None else float("nan")), gaps, tokens


def pct(xs, p):
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[min(len(s) - 1, int(p / 100 * len(s)))]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", default="http://127.0.0.1:8000")
    parser.add_argument("--concurrency", default="1,8,32,64")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--prompt-words", type=int, default=128)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--api-key", default="none")
    o = parser.parse_args()
    print("| concurrency | requests | TTFT p50 ms | TTFT p99 ms | ITL p50 ms | ITL p99 ms | tok/s total "
          "| tok/s per stream |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    next_id = 0
    for c in (int(x) for x in o.concurrency.split(",")):
        n = c * o.rounds
        ids = list(range(next_id, next_id + n))
        next_id += n
        results, errors, lock = [], [], threading.Lock()

        def worker():
            while True:
                with lock:
                    if not ids or errors:
                        return
                    i = ids.pop(0)
                try:
                    r = one(o.base, i, o)
                except Exception as e:  # the run is void: report it and stop
                    with lock:
                        errors.append(e)
                    return
                with lock:
                    results.append(r)

        start = time.perf_counter()
        threads = [threading.Thread(target=worker) for _ in range(c)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise SystemExit(f"bench_serve.py: {errors[0]}")
        seconds = time.perf_counter() - start
        tokens = sum(r[2] for r in results)
        ttft = [r[0] for r in results]
        gaps = [g for r in results for g in r[1]]
        print(f"| {c} | {n} | {pct(ttft, 50):.1f} | {pct(ttft, 99):.1f} | {pct(gaps, 50):.1f} | {pct(gaps, 99):.1f} "
              f"| {tokens / seconds:.1f} | {tokens / seconds / c:.1f} |", flush=True)


if __name__ == "__main__":
    main()
