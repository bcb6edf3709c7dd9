// 1,000 requests at 64 concurrency through the npm openai package, on the
// shipped tiny model: none is lost, each answer (text, finish reason, usage)
// equals the same request run alone, and /metrics adds up (successes, tokens,
// HTTP 200s, latency counts; nothing running, waiting, failed or cancelled).
import test, { after, before } from 'node:test';
import assert from 'node:assert/strict';
import { startServer } from './server.mjs';

const kDistinct = 100, kRepeats = 10, kConcurrency = 64;

let server;
before(async () => { server = await startServer(); });
after(async () => server.stop());

// Completions and chat, greedy and seeded, short prompts and answers.
function request(i) {
  const sampling = i % 2 ? { temperature: 0.8, seed: i } : {};
  if (i % 3 === 0)
    return ['chat', { model: 'm', messages: [{ role: 'user', content: `Question ${i}: why?` }], max_tokens: 8, ...sampling }];
  return ['completions', { model: 'm', prompt: `Story ${i}: once there was`, max_tokens: 8, ...sampling }];
}

async function run(client, [kind, body]) {
  const r = kind === 'chat' ? await client.chat.completions.create(body) : await client.completions.create(body);
  const c = r.choices[0];
  return { text: c.message?.content ?? c.text, finish: c.finish_reason, usage: r.usage };
}

test('1,000 requests at 64 concurrency: none lost, each equal to its run alone, metrics add up', async () => {
  const client = server.client({ timeout: 120_000 });
  const alone = [];
  for (let i = 0; i < kDistinct; ++i) alone.push(await run(client, request(i)));

  const before = await server.metrics();
  const jobs = Array.from({ length: kDistinct * kRepeats }, (_, j) => j % kDistinct);
  const answers = new Array(jobs.length);
  let next = 0;
  await Promise.all(Array.from({ length: kConcurrency }, async () => {
    while (next < jobs.length) {
      const j = next++;
      answers[j] = await run(client, request(jobs[j]));
    }
  }));
  const after = await server.metrics();

  let prompt = 0, generated = 0;
  for (let j = 0; j < jobs.length; ++j) {
    assert.deepEqual(answers[j], alone[jobs[j]], `request ${j} (distinct ${jobs[j]})`);
    prompt += answers[j].usage.prompt_tokens;
    generated += answers[j].usage.completion_tokens;
  }
  const delta = (name) => after[name] - before[name];
  const n = jobs.length;
  assert.equal(delta('request_success_total{finished_reason="stop"}') +
    delta('request_success_total{finished_reason="length"}'), n);
  assert.equal(delta('prompt_tokens_total'), prompt);
  assert.equal(delta('generation_tokens_total'), generated);
  assert.equal(delta('e2e_request_latency_seconds_count'), n);
  assert.equal(delta('time_to_first_token_seconds_count'), n);
  assert.equal(delta('http_requests_total{code="200"}'), n + 1, 'the answers, and the first /metrics itself');
  for (const name of ['request_failure_total', 'request_cancelled_total', 'request_rejected_total'])
    assert.equal(delta(name), 0, name);
  assert.equal(after.num_requests_running, 0);
  assert.equal(after.num_requests_waiting, 0);
  assert.ok(delta('prefix_cache_queries_total') >= prompt, 'every prompt was looked up in the prefix cache');
});
