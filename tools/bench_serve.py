#!/usr/bin/env python3
"""Throughput of a running `tessera serve` (or any OpenAI-compatible server) at
several concurrencies: time to first token, inter-token latency and total
generated tokens/s. Each level runs `concurrency x rounds` streamed completions,
`concurrency` at a time (one thread each); every prompt starts with its own
number, so no two share a cached prefix. Requests are greedy and send vLLM's
`ignore_eos`, so every answer is max_tokens long. Python's standard library only
(the GPU machine has no node), so it runs wherever python3 does.

Columns: "tok/s total" is every generated token over the level's wall time
(prompts included: the first steps are prefill); "decode tok/s" counts only the
window in which every stream of the level had its first token and none had
ended (the batched decode's steady state; chunks of text, about one a token).
From the server's /metrics (tessera's engine_* counters; skipped when absent) a
second table shows what the inference thread did in the level: steps, the mean
sequences and tokens a step ran (the batch reached), the share of the wall time
inside steps (forward pass and sampling) and in the serving work around them,
and "engine tok/s": generated tokens over the time inside steps, what the engine
alone would give on the same steps. "launch ms/step" is the part of a step
before the device computes on its own (choosing it and queueing its pass; on the
CPU the choosing alone), and "between ms/step" the serving work from a step's
outputs to the next step, which the device waits for (on a GPU the rest of the
serving work runs while it computes).

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
    """One streamed completion: (ttft ms, [inter-token gaps ms], completion tokens, [chunk times])."""
    url = urllib.parse.urlsplit(base)
    body = json.dumps({"model": "bench", "prompt": prompt(i, o.prompt_words), "max_tokens": o.max_tokens,
                       "temperature": 0, "ignore_eos": True, "stream": True,
                       "stream_options": {"include_usage": True}})
    connection = http.client.HTTPConnection(url.hostname, url.port, timeout=600)
    start = time.perf_counter()
    connection.request("POST", "/v1/completions", body, {"Content-Type": "application/json",
                                                          "Authorization": f"Bearer {o.api_key}"})
    response = connection.getresponse()
    if response.status != 200:
        raise RuntimeError(f"request {i}: HTTP {response.status}: {response.read()[:300]!r}")
    first = last = None
    gaps, tokens, times = [], 0, []
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
        times.append(now)
        if first is None:
            first = now
        else:
            gaps.append((now - last) * 1000)
        last = now
    connection.close()
    return ((first - start) * 1000 if first is not None else float("nan")), gaps, tokens, times


def decode_rate(results):
    """Chunks per second while every stream was decoding: from the last first chunk to the first last one."""
    streams = [r[3] for r in results if r[3]]
    if not streams:
        return float("nan")
    begin, end = max(t[0] for t in streams), min(t[-1] for t in streams)
    if end <= begin:
        return float("nan")
    return sum(sum(1 for x in t if begin < x <= end) for t in streams) / (end - begin)


def scrape(base):
    """tessera's engine_* and generation counters from /metrics, or None."""
    url = urllib.parse.urlsplit(base)
    try:
        connection = http.client.HTTPConnection(url.hostname, url.port, timeout=10)
        connection.request("GET", "/metrics")
        text = connection.getresponse().read().decode()
    except OSError:
        return None
    values = {}
    for line in text.splitlines():
        if line.startswith("tessera:engine_") or line.startswith("tessera:generation_tokens_total"):
            sample, value = line.rsplit(" ", 1)  # the sample's labels: the model's name alone
            values[sample[len("tessera:") :].split("{")[0]] = float(value)
    return values if "engine_steps_total" in values else None


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
          "| tok/s per stream | decode tok/s |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    engine_rows = []
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

        before = scrape(o.base)
        start = time.perf_counter()
        threads = [threading.Thread(target=worker) for _ in range(c)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise SystemExit(f"bench_serve.py: {errors[0]}")
        seconds = time.perf_counter() - start
        after = scrape(o.base)
        tokens = sum(r[2] for r in results)
        ttft = [r[0] for r in results]
        gaps = [g for r in results for g in r[1]]
        print(f"| {c} | {n} | {pct(ttft, 50):.1f} | {pct(ttft, 99):.1f} | {pct(gaps, 50):.1f} | {pct(gaps, 99):.1f} "
              f"| {tokens / seconds:.1f} | {tokens / seconds / c:.1f} | {decode_rate(results):.1f} |", flush=True)
        if before and after:
            d = {k: after[k] - before.get(k, 0) for k in after}
            steps = max(d["engine_steps_total"], 1)
            in_steps = d["engine_step_seconds_total"]
            serving = d["engine_iteration_seconds_total"] - in_steps
            engine_rows.append(
                f"| {c} | {d['engine_steps_total']:.0f} | {d['engine_step_sequences_total'] / steps:.1f} "
                f"| {d['engine_step_tokens_total'] / steps:.1f} | {100 * in_steps / seconds:.1f} "
                f"| {100 * serving / seconds:.1f} | {1000 * serving / steps:.3f} "
                f"| {d['generation_tokens_total'] / in_steps if in_steps > 0 else float('nan'):.1f} "
                f"| {1000 * d.get('engine_launch_seconds_total', float('nan')) / steps:.3f} "
                f"| {1000 * d.get('engine_between_steps_seconds_total', float('nan')) / steps:.3f} |")
    if engine_rows:
        print()
        print("| concurrency | steps | sequences/step | tokens/step | in steps % of wall | serving work % of wall "
              "| serving ms/step | engine tok/s | launch ms/step | between ms/step |")
        print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        print("\n".join(engine_rows), flush=True)


if __name__ == "__main__":
    main()
