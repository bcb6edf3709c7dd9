#!/usr/bin/env node
// Reference token ids from Hugging Face's tokenizers (npm `tokenizers`, the Rust
// library with a Node binding), for tessera's tokenizer tests and benchmark.
//
//   node encode.js TOKENIZER_JSON TEXT_FILE [--no-add-special] [--out FILE] [--repeat N]
//
// Encodes the whole file as one text (HF `encode(text, null, {addSpecialTokens})`)
// and writes the ids as one JSON array (to --out, else stdout). With --repeat N it
// encodes N more times and prints on stderr the first encode's wall time and the
// best of the N, in seconds, as `first_encode_seconds <t>` and `encode_seconds <t>`
// (for the benchmark; set RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false).
// The module is found through NODE_PATH or TESSERA_TEST_MATERIAL's node/node_modules.
'use strict';
const fs = require('fs');
const path = require('path');

function loadTokenizers() {
  try {
    return require('tokenizers');
  } catch (e) {
    const cache = process.env.TESSERA_TEST_MATERIAL ||
        path.join(require('os').homedir(), '.cache', 'tessera-test-material');
    return require(path.join(cache, 'node', 'node_modules', 'tokenizers'));
  }
}

async function main() {
  const args = process.argv.slice(2);
  const positional = [];
  let addSpecial = true, out = null, repeat = 0;
  for (let i = 0; i < args.length; ++i) {
    if (args[i] === '--no-add-special') addSpecial = false;
    else if (args[i] === '--out') out = args[++i];
    else if (args[i] === '--repeat') repeat = parseInt(args[++i], 10);
    else positional.push(args[i]);
  }
  if (positional.length !== 2) {
    process.stderr.write('usage: encode.js TOKENIZER_JSON TEXT_FILE [--no-add-special] [--out FILE] [--repeat N]\n');
    process.exit(2);
  }
  const {Tokenizer} = loadTokenizers();
  const tokenizer = Tokenizer.fromFile(positional[0]);
  const text = fs.readFileSync(positional[1], 'utf8');
  const first = process.hrtime.bigint();
  let encoding = await tokenizer.encode(text, null, {addSpecialTokens: addSpecial});
  const firstSeconds = Number(process.hrtime.bigint() - first) / 1e9;
  if (repeat > 0) {
    let best = Infinity;
    for (let r = 0; r < repeat; ++r) {
      const t0 = process.hrtime.bigint();
      encoding = await tokenizer.encode(text, null, {addSpecialTokens: addSpecial});
      best = Math.min(best, Number(process.hrtime.bigint() - t0) / 1e9);
    }
    process.stderr.write(`first_encode_seconds ${firstSeconds}\nencode_seconds ${best}\n`);
  }
  const json = JSON.stringify(encoding.getIds());
  if (out) fs.writeFileSync(out, json); else process.stdout.write(json + '\n');
}

main().catch((e) => { process.stderr.write(`encode.js: ${e}\n`); process.exit(1); });
