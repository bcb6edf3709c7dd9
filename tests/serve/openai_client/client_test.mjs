// tessera serve through the npm openai package: completions and chat, whole
// and streamed, n > 1, usage, stop, logprobs, and each error status as the
// client raises it (400, 401, 404, 413, 429). Run by ctest (serve_openai_client).
import test, { after, before } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { startServer } from './server.mjs';

let server;
let client;
before(async () => {
  server = await startServer();
  client = server.client();
});
after(async () => server.stop());

const user = (content) => [{ role: 'user', content }];

async function collect(stream) {
  const out = { texts: [], finish: [], usage: null, logprobs: [] };
  for await (const chunk of stream) {
    if (chunk.usage) out.usage = chunk.usage;
    for (const c of chunk.choices) {
      out.texts[c.index] = (out.texts[c.index] ?? '') + (c.delta?.content ?? c.text ?? '');
      if (c.finish_reason) out.finish[c.index] = c.finish_reason;
      if (c.logprobs?.content) out.logprobs.push(...c.logprobs.content);
    }
  }
  return out;
}

test('completions, whole and streamed, with usage', async () => {
  const request = { model: 'tessera-tiny', prompt: 'Once upon a time', max_tokens: 16 };
  const whole = await client.completions.create(request);
  assert.equal(whole.object, 'text_completion');
  assert.match(whole.id, /^cmpl-/);
  assert.equal(whole.choices.length, 1);
  assert.equal(whole.choices[0].finish_reason, 'length');
  assert.equal(whole.usage.completion_tokens, 16);
  assert.equal(whole.usage.total_tokens, whole.usage.prompt_tokens + 16);
  const streamed = await collect(await client.completions.create({
    ...request, stream: true, stream_options: { include_usage: true } }));
  assert.equal(streamed.texts[0], whole.choices[0].text);
  assert.equal(streamed.finish[0], 'length');
  assert.deepEqual(streamed.usage, whole.usage);
});

test('chat, whole and streamed, equal', async () => {
  const request = { model: 'tessera-tiny', messages: user('Tell me about the sea.'), max_tokens: 20 };
  const whole = await client.chat.completions.create(request);
  assert.equal(whole.object, 'chat.completion');
  assert.equal(whole.choices[0].message.role, 'assistant');
  assert.ok(whole.choices[0].message.content.length > 0);
  const streamed = await collect(await client.chat.completions.create({
    ...request, stream: true, stream_options: { include_usage: true } }));
  assert.equal(streamed.texts[0], whole.choices[0].message.content);
  assert.equal(streamed.finish[0], whole.choices[0].finish_reason);
  assert.deepEqual(streamed.usage, whole.usage);
});

test('n > 1: each choice is the request with seed + i alone, whole and streamed', async () => {
  const request = { model: 'tessera-tiny', messages: user('Hello'), max_tokens: 12, temperature: 0.9, seed: 40 };
  const three = await client.chat.completions.create({ ...request, n: 3 });
  assert.deepEqual(three.choices.map((c) => c.index), [0, 1, 2]);
  let tokens = 0;
  for (let i = 0; i < 3; ++i) {
    const alone = await client.chat.completions.create({ ...request, seed: 40 + i });
    assert.equal(three.choices[i].message.content, alone.choices[0].message.content);
    tokens += alone.usage.completion_tokens;
  }
  assert.equal(three.usage.completion_tokens, tokens);
  const streamed = await collect(await client.chat.completions.create({ ...request, n: 3, stream: true }));
  assert.deepEqual(streamed.texts, three.choices.map((c) => c.message.content));
});

test('stop strings end the text and never show', async () => {
  const full = (await client.completions.create({ model: 'm', prompt: 'Once upon a time', max_tokens: 24 }))
    .choices[0].text;
  const stop = full.slice(10, 14);
  const cut = full.slice(0, full.indexOf(stop));
  const whole = await client.completions.create({ model: 'm', prompt: 'Once upon a time', max_tokens: 24, stop: [stop] });
  assert.equal(whole.choices[0].text, cut);
  assert.equal(whole.choices[0].finish_reason, 'stop');
  const streamed = await collect(await client.completions.create({
    model: 'm', prompt: 'Once upon a time', max_tokens: 24, stop, stream: true }));
  assert.equal(streamed.texts[0], cut);
  assert.equal(streamed.finish[0], 'stop');
});

test('logprobs: chat content entries and completions arrays, whole and streamed', async () => {
  const chat = { model: 'm', messages: user('Hello'), max_tokens: 8, logprobs: true, top_logprobs: 3 };
  const whole = await client.chat.completions.create(chat);
  const content = whole.choices[0].logprobs.content;
  assert.equal(content.length, whole.usage.completion_tokens);
  assert.equal(content.map((e) => e.token).join(''), whole.choices[0].message.content);
  for (const e of content) {
    assert.equal(e.top_logprobs.length, 3);
    assert.equal(e.logprob, e.top_logprobs[0].logprob, 'greedy picks the likeliest token');
    assert.deepEqual(e.bytes, [...Buffer.from(e.token)]);
  }
  const streamed = await collect(await client.chat.completions.create({ ...chat, stream: true }));
  assert.deepEqual(streamed.logprobs, content);

  const completion = await client.completions.create({ model: 'm', prompt: 'The river', max_tokens: 8, logprobs: 2 });
  const lp = completion.choices[0].logprobs;
  assert.equal(lp.tokens.join(''), completion.choices[0].text);
  assert.equal(lp.token_logprobs.length, 8);
  assert.equal(lp.top_logprobs.length, 8);
  assert.equal(lp.text_offset[0], 0);
});

test('special-token text in a message stays text', async () => {
  const tokenize = async (body) => (await (await fetch(`${server.base}/tokenize`, {
    method: 'POST', body: JSON.stringify(body) })).json()).tokens;
  const end = await tokenize({ prompt: '<|end|>', add_special_tokens: false });
  assert.equal(end.length, 1, 'a /tokenize prompt parses special tokens');
  const count = (ids) => ids.filter((id) => id === end[0]).length;
  const typed = await tokenize({ messages: user('a <|end|> b') });
  assert.equal(count(typed), count(await tokenize({ messages: user('a b') })),
    'the <|end|> typed by the user is not the control token');
  const answer = await client.chat.completions.create({ model: 'm', messages: user('a <|end|> b'), max_tokens: 4 });
  assert.equal(answer.usage.prompt_tokens, typed.length);
});

test('errors: 400, 404, 413 raise the client\'s error classes with OpenAI\'s body', async () => {
  await assert.rejects(client.chat.completions.create({ model: 'm', messages: user('x'), temperature: 5 }),
    (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && e.error.param === 'temperature');
  const long = 'hello '.repeat(3000);
  await assert.rejects(client.completions.create({ model: 'm', prompt: long }),
    (e) => e instanceof OpenAI.BadRequestError && e.code === 'context_length_exceeded');
  await assert.rejects(client.completions.create({ model: 'm', prompt: 'x', max_tokens: 5000 }),
    (e) => e instanceof OpenAI.BadRequestError && e.code === 'context_length_exceeded' && e.param === 'max_tokens');
  await assert.rejects(client.models.retrieve('nope'), (e) => e instanceof OpenAI.NotFoundError);
  await assert.rejects(client.completions.create({ model: 'm', prompt: 'x'.repeat(2 << 20) }),
    (e) => e instanceof OpenAI.APIError && e.status === 413 && /over the limit/.test(e.message));
});

test('401 without the key, 200 with it', async () => {
  const keyed = await startServer(['--api-key', 'sesame']);
  try {
    await assert.rejects(keyed.client({ apiKey: 'wrong' }).models.list(),
      (e) => e instanceof OpenAI.AuthenticationError && e.status === 401);
    const models = await keyed.client({ apiKey: 'sesame' }).models.list();
    assert.equal(models.data[0].id, 'tessera-tiny');
  } finally {
    await keyed.stop();
  }
});

test('429 with Retry-After when the queue is full', async () => {
  const small = await startServer(['--max-requests', '1', '--max-waiting', '1']);
  try {
    const c = small.client();
    const slow = { model: 'm', prompt: 'Once', max_tokens: 400, logit_bias: { 1: -100 } };
    const results = await Promise.allSettled(Array.from({ length: 6 }, () => c.completions.create(slow)));
    const refused = results.filter((r) => r.status === 'rejected');
    assert.ok(refused.length >= 1, 'some request was refused');
    for (const r of refused) {
      assert.ok(r.reason instanceof OpenAI.RateLimitError, String(r.reason));
      assert.equal(r.reason.headers.get('retry-after'), '1');
    }
    assert.ok(results.some((r) => r.status === 'fulfilled'));
  } finally {
    await small.stop();
  }
});
