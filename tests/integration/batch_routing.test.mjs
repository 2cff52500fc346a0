// Batch lines go through the same routing as interactive requests (docs/batch.md, "Execution"):
// under routing.policy expected_finish each line's prompt blocks reach the scheduler, so lines
// that share long instructions are placed where those are cached. Observed through the
// prompt-cache model in /admin/v1/replicas: without the blocks it stays empty. One simulated
// phone the gateway starts itself; every wait polls a condition with a deadline.

import assert from 'node:assert/strict';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import { REPO_ROOT, eventually, request, startGateway, stopChecked } from './lib/gateway.mjs';

const AGENT_BIN = process.env.FLEETGATE_AGENT_BIN || path.join(REPO_ROOT, 'build', 'bin', 'fleetgate-agent');
const MODEL = 'qwen3.5-0.8b';
const KEY = 'sk-batch-routing';
const { default: OpenAI, toFile } = await import('openai');

// ~4 KiB of shared instructions (32 prompt blocks of 128 bytes), then a short case per line.
const INSTRUCTIONS = 'Review the transaction for fraud. '.repeat(120);

function jsonl(n) {
  const lines = [];
  for (let i = 0; i < n; i++) {
    lines.push(
      JSON.stringify({
        custom_id: `case-${i}`,
        method: 'POST',
        url: '/v1/chat/completions',
        body: {
          model: MODEL,
          max_tokens: 1,
          messages: [
            { role: 'system', content: INSTRUCTIONS },
            { role: 'user', content: `Transaction ${i}: 42 EUR` },
          ],
        },
      }),
    );
  }
  return lines.join('\n') + '\n';
}

describe('batch lines under expected_finish', () => {
  let gw;
  let openai;

  before(async () => {
    gw = await startGateway(
      {
        server: { api_keys_env: 'FG_IT_BATCH_ROUTING_KEYS' },
        models: [{ name: MODEL, local: { count: 1, engine: 'sim', profile: 'fast-test', time_scale: 20, slots: 1 } }],
        health: { interval: '300ms', timeout: '200ms' },
        routing: { policy: 'expected_finish', exploration: 0 },
        batch: { poll_interval: '100ms', retry_backoff: '50ms' },
      },
      { env: { FLEETGATE_AGENT_BIN: AGENT_BIN, FG_IT_BATCH_ROUTING_KEYS: KEY }, timeoutMs: 15000 },
    );
    openai = new OpenAI({ baseURL: `${gw.publicUrl}/v1`, apiKey: KEY, maxRetries: 0, timeout: 15000 });
    await eventually(async () => (await gw.metric('fleetgate_slots', { model: MODEL, state: 'free' })) >= 1, {
      timeoutMs: 15000,
      what: 'a free slot',
    });
  });
  after(async () => {
    await stopChecked(gw);
  });

  test('the prompt-cache model learns the lines\' prompts', async () => {
    const file = await openai.files.create({ file: await toFile(Buffer.from(jsonl(4)), 'cases.jsonl'), purpose: 'batch' });
    const batch = await openai.batches.create({
      input_file_id: file.id,
      endpoint: '/v1/chat/completions',
      completion_window: '24h',
    });
    let done;
    await eventually(
      async () => {
        done = await openai.batches.retrieve(batch.id);
        return ['completed', 'failed', 'expired', 'cancelled'].includes(done.status);
      },
      { timeoutMs: 30000, everyMs: 100, what: 'the batch ends' },
    );
    assert.equal(done.status, 'completed', JSON.stringify(done.errors));
    assert.deepEqual(done.request_counts, { total: 4, completed: 4, failed: 0 });
    const res = await request(`${gw.adminUrl}/admin/v1/replicas`);
    assert.equal(res.status, 200, res.text);
    const parsed = JSON.parse(res.text);
    const replicas = parsed.replicas ?? parsed;
    assert.equal(replicas.length, 1);
    const cache = replicas[0].prompt_cache;
    // The last line's prompt: at least the shared instructions' blocks are held for its slot.
    assert.ok(cache.slot_blocks >= 32, JSON.stringify(cache));
  });
});
