// End to end with the official `openai` npm package (pinned in tests/integration/package.json) as
// the client: what an application actually does against the gateway URL.

import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';

import { startFakeReplica } from './lib/fake_replica.mjs';
import { startGateway, stopChecked } from './lib/gateway.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const EXPECTED_VERSION = JSON.parse(fs.readFileSync(path.join(here, 'package.json'), 'utf8')).dependencies.openai;

async function loadOpenAI() {
  try {
    const mod = await import('openai');
    return mod;
  } catch (e) {
    throw new Error(
      `the openai npm package is not installed (${e.code ?? e.message}): run \`npm ci --prefix tests/integration\` ` +
        '(./fleet test does it)',
    );
  }
}

describe('official openai SDK against the gateway', () => {
  let OpenAI;
  let APIError;
  let replicas;
  let gw;
  let client;

  before(async () => {
    const mod = await loadOpenAI();
    OpenAI = mod.default;
    APIError = mod.APIError;
    const installed = JSON.parse(fs.readFileSync(path.join(here, 'node_modules', 'openai', 'package.json'), 'utf8')).version;
    assert.equal(installed, EXPECTED_VERSION, `openai ${installed} installed, ${EXPECTED_VERSION} pinned: run npm ci --prefix tests/integration`);
    replicas = [await startFakeReplica({ name: 'sdk1' }), await startFakeReplica({ name: 'sdk2' })];
    gw = await startGateway({
      server: { api_keys_env: 'FG_IT_SDK_KEYS' },
      models: [
        { name: 'qwen3.5-9b-fraud', endpoints: replicas.map((r) => r.url) },
        { name: 'qwen3.5-0.8b', endpoints: [] },
      ],
    }, { env: { FG_IT_SDK_KEYS: 'sk-sdk-test' } });
    client = new OpenAI({ baseURL: `${gw.publicUrl}/v1`, apiKey: 'sk-sdk-test', maxRetries: 0, timeout: 15000 });
  });
  after(async () => {
    await stopChecked(gw);
    for (const r of replicas ?? []) {
      await r.close();
    }
  });

  const last = () => replicas.map((r) => r.requests.at(-1)).filter(Boolean).sort((a, b) => b.receivedAt - a.receivedAt)[0];

  test('chat completion (non-streaming)', async () => {
    const completion = await client.chat.completions.create({
      model: 'qwen3.5-9b-fraud',
      messages: [{ role: 'user', content: 'Transaction 4411: 3 cards, 2 countries, 5 minutes. Risk?' }],
      max_tokens: 8,
    });
    const seen = last();
    const expected = JSON.parse(seen.sent);
    assert.equal(completion.id, expected.id);
    assert.equal(completion.choices[0].message.content, expected.choices[0].message.content);
    assert.equal(completion.usage.prompt_tokens, expected.usage.prompt_tokens);
    assert.equal(seen.json.messages[0].content, 'Transaction 4411: 3 cards, 2 countries, 5 minutes. Risk?');
    assert.equal(seen.headers.authorization, undefined, 'the client key is not forwarded');
  });

  test('chat completion with .withResponse(): X-Request-Id visible to the SDK', async () => {
    const { data, response } = await client.chat.completions
      .create({ model: 'qwen3.5-9b-fraud', messages: [{ role: 'user', content: 'hi' }] })
      .withResponse();
    assert.ok(response.headers.get('x-request-id'));
    assert.equal(data.object, 'chat.completion');
  });

  test('chat completion (streaming)', async () => {
    const stream = await client.chat.completions.create({
      model: 'qwen3.5-9b-fraud',
      messages: [{ role: 'user', content: 'stream please' }],
      stream: true,
      stream_options: { include_usage: true },
    });
    let content = '';
    let chunks = 0;
    let usage = null;
    for await (const chunk of stream) {
      ++chunks;
      content += chunk.choices[0]?.delta?.content ?? '';
      usage = chunk.usage ?? usage;
    }
    const seen = last();
    assert.equal(seen.json.stream, true);
    const name = seen.replica;
    assert.equal(content, `tok0-${name} tok1-${name} tok2-${name} `);
    assert.equal(chunks, 5, 'three content chunks, the finish chunk and the usage chunk');
    assert.equal(usage.completion_tokens, 3);
  });

  test('completions (legacy), streaming and not', async () => {
    const completion = await client.completions.create({ model: 'qwen3.5-9b-fraud', prompt: 'RISK_LEVEL:', max_tokens: 4 });
    const seen = last();
    assert.equal(seen.path, '/v1/completions');
    assert.equal(completion.choices[0].text, JSON.parse(seen.sent).choices[0].text);

    const stream = await client.completions.create({ model: 'qwen3.5-9b-fraud', prompt: 'RISK_LEVEL:', stream: true });
    let text = '';
    for await (const chunk of stream) {
      text += chunk.choices[0]?.text ?? '';
    }
    const name = last().replica;
    assert.equal(text, `tok0-${name} tok1-${name} tok2-${name} `);
  });

  test('embeddings (the SDK asks for base64 and decodes it)', async () => {
    const result = await client.embeddings.create({ model: 'qwen3.5-9b-fraud', input: ['first', 'second'] });
    const seen = last();
    assert.equal(seen.path, '/v1/embeddings');
    assert.equal(seen.json.encoding_format, 'base64');
    assert.equal(result.data.length, 2);
    assert.deepEqual(result.data[0].embedding, [0.25, -0.5, 0.125, seen.seq]);
    assert.deepEqual(result.data[1].embedding, [1.25, -0.5, 0.125, seen.seq]);
  });

  test('models.list and models.retrieve', async () => {
    const ids = [];
    for await (const model of client.models.list()) {
      ids.push(model.id);
    }
    assert.deepEqual(ids.sort(), ['qwen3.5-0.8b', 'qwen3.5-9b-fraud']);
    const one = await client.models.retrieve('qwen3.5-9b-fraud');
    assert.equal(one.id, 'qwen3.5-9b-fraud');
  });

  test('unknown model surfaces as APIError 404 model_not_found', async () => {
    await assert.rejects(
      client.chat.completions.create({ model: 'gpt-4o', messages: [{ role: 'user', content: 'x' }] }),
      (err) => {
        assert.ok(err instanceof APIError, `got ${err?.constructor?.name}: ${err?.message}`);
        assert.equal(err.status, 404);
        assert.equal(err.code, 'model_not_found');
        assert.match(err.message, /gpt-4o/);
        return true;
      },
    );
    await assert.rejects(client.models.retrieve('gpt-4o'), (err) => err instanceof OpenAI.NotFoundError);
  });

  test('a wrong API key surfaces as AuthenticationError 401', async () => {
    const bad = new OpenAI({ baseURL: `${gw.publicUrl}/v1`, apiKey: 'sk-wrong', maxRetries: 0 });
    await assert.rejects(bad.models.list(), (err) => err instanceof OpenAI.AuthenticationError && err.status === 401);
  });
});
