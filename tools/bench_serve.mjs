// Throughput of a running `tessera serve` (or any OpenAI-compatible server) at
// several concurrencies, through the npm openai package: time to first token,
// inter-token latency and total generated tokens/s. Each level runs
// `concurrency x rounds` streamed completions, `concurrency` at a time; every
// prompt starts with its own number, so no two share a cached prefix.
//   node tools/bench_serve.mjs --base http://127.0.0.1:8000 [--concurrency 1,8,32,64]
//        [--rounds 2] [--prompt-words 128] [--max-tokens 64]
// tools/bench_serve.sh starts the server, runs this and stops it.
import { parseArgs } from 'node:util';
import { createRequire } from 'node:module';

const require = createRequire(new URL('../tests/serve/openai_client/package.json', import.meta.url));
const { default: OpenAI } = await import(require.resolve('openai'));

const { values: o } = parseArgs({
  options: {
    base: { type: 'string', default: 'http://127.0.0.1:8000' },
    concurrency: { type: 'string', default: '1,8,32,64' },
    rounds: { type: 'string', default: '2' },
    'prompt-words': { type: 'string', default: '128' },
    'max-tokens': { type: 'string', default: '64' },
    'api-key': { type: 'string', default: 'none' },
  },
});
const client = new OpenAI({ baseURL: `${o.base}/v1`, apiKey: o['api-key'], maxRetries: 0, timeout: 600_000 });
const words = 'the river ran past the old mill and under the stone bridge toward the sea'.split(' ');
const prompt = (i) => `${i}. ` + Array.from({ length: Number(o['prompt-words']) }, (_, k) => words[k % words.length]).join(' ');

async function one(i) {
  const start = performance.now();
  const stream = await client.completions.create({
    model: 'bench', prompt: prompt(i), max_tokens: Number(o['max-tokens']), temperature: 0,
    stream: true, stream_options: { include_usage: true } });
  let first = null, last = null, tokens = 0;
  const gaps = [];
  for await (const chunk of stream) {
    if (chunk.usage) tokens = chunk.usage.completion_tokens;
    if (!chunk.choices.length || !chunk.choices[0].text) continue;
    const now = performance.now();
    if (first === null) first = now; else gaps.push(now - last);
    last = now;
  }
  return { ttft: first - start, gaps, tokens };
}

const pct = (xs, p) => {
  if (!xs.length) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
};
const f = (x) => x.toFixed(1);

console.log('| concurrency | requests | TTFT p50 ms | TTFT p99 ms | ITL p50 ms | ITL p99 ms | tok/s total | tok/s per stream |');
console.log('|---:|---:|---:|---:|---:|---:|---:|---:|');
let id = 0;
for (const c of o.concurrency.split(',').map(Number)) {
  const n = c * Number(o.rounds);
  const results = [];
  let next = 0;
  const start = performance.now();
  await Promise.all(Array.from({ length: c }, async () => {
    while (next < n) { ++next; results.push(await one(id++)); }
  }));
  const seconds = (performance.now() - start) / 1000;
  const tokens = results.reduce((a, r) => a + r.tokens, 0);
  const ttft = results.map((r) => r.ttft), gaps = results.flatMap((r) => r.gaps);
  console.log(`| ${c} | ${n} | ${f(pct(ttft, 50))} | ${f(pct(ttft, 99))} | ${f(pct(gaps, 50))} | ${f(pct(gaps, 99))} | ` +
    `${f(tokens / seconds)} | ${f(tokens / seconds / c)} |`);
}
