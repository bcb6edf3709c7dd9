// Starts `tessera serve` on a free port for a test and stops it after: the
// binary and model come from the environment ctest sets (TESSERA_BINARY,
// TESSERA_MODEL), so the tests run against the real server as a user starts it.
import { spawn } from 'node:child_process';
import OpenAI from 'openai';

export const TESSERA = process.env.TESSERA_BINARY ?? 'build/bin/tessera';
export const MODEL = process.env.TESSERA_MODEL ?? 'models/tessera-tiny';

export async function startServer(extra = []) {
  const args = ['serve', '--model', MODEL, '--port', '0', '--threads', '2', '--kv-memory', '64MiB',
    '--served-model-name', 'tessera-tiny', ...extra];
  const child = spawn(TESSERA, args, { stdio: ['ignore', 'inherit', 'pipe'] });
  let log = '';
  const port = await new Promise((resolve, reject) => {
    child.stderr.on('data', (data) => {
      log += data;
      const m = /listening on http:\/\/[^:]+:(\d+)/.exec(log);
      if (m) resolve(Number(m[1]));
    });
    child.on('exit', (code) => reject(new Error(`tessera serve exited with ${code}: ${log}`)));
  });
  child.stderr.on('data', (data) => process.stderr.write(data));
  const base = `http://127.0.0.1:${port}`;
  for (let i = 0; ; ++i) {
    const health = await fetch(`${base}/health`).catch(() => null);
    if (health?.status === 200) break;
    if (i > 600) throw new Error('the server did not become ready in 60 s');
    await new Promise((r) => setTimeout(r, 100));
  }
  return {
    port,
    base,
    client: (options = {}) => new OpenAI({ baseURL: `${base}/v1`, apiKey: 'none', maxRetries: 0, ...options }),
    metrics: async () => parseMetrics(await (await fetch(`${base}/metrics`)).text()),
    stop: () => new Promise((resolve) => {
      child.removeAllListeners('exit');
      child.on('exit', resolve);
      child.kill('SIGTERM');
    }),
  };
}

// "tessera:name{labels,model_name="M"} value" lines to {"name{labels}": value}
// (`name` alone without other labels); a sample without vLLM's model_name label throws.
export function parseMetrics(text) {
  const out = {};
  for (const line of text.split('\n')) {
    if (!line.startsWith('tessera:')) continue;
    const m = /^tessera:([a-z0-9_]+)\{(.*?),?model_name="(?:[^"\\]|\\.)*"\} (\S+)$/.exec(line);
    if (!m) throw new Error(`a /metrics sample without model_name: ${line}`);
    out[m[2] ? `${m[1]}{${m[2]}}` : m[1]] = Number(m[3]);
  }
  return out;
}
