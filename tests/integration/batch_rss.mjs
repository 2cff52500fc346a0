// Measures the gateway's memory while it runs one big batch over fast simulated phones
// (docs/batch.md, "Figures"). Not a test (no .test.mjs): run by hand, after a build:
//   node tests/integration/batch_rss.mjs [lines=100000]
// Prints the peak RSS (VmHWM) of the gateway process, the RSS before the batch, and the time.

import fs from 'node:fs';
import path from 'node:path';

import { REPO_ROOT, eventually, makeTempDir, removeDir, startGateway } from './lib/gateway.mjs';

const { default: OpenAI, toFile } = await import('openai');
const LINES = Number(process.argv[2] ?? 100000);
const MODEL = 'qwen3.5-0.8b';

function status(pid) {
  const text = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = (name) => Number(new RegExp(`${name}:\\s+(\\d+)`).exec(text)[1]);
  return { rss: kb('VmRSS'), hwm: kb('VmHWM') };
}

const dir = makeTempDir('fleetgate-batch-rss-');
const gw = await startGateway(
  {
    models: [{ name: MODEL, local: { count: 8, engine: 'sim', profile: 'fast-test', time_scale: 50, slots: 8 } }],
    health: { interval: '300ms', timeout: '200ms' },
    storage: { path: path.join(dir, 'batch.db') },
    batch: { max_lines: LINES, poll_interval: '200ms' },
    log: { level: 'warn' },
  },
  { env: { FLEETGATE_AGENT_BIN: path.join(REPO_ROOT, 'build', 'bin', 'fleetgate-agent') }, timeoutMs: 20000 },
);
try {
  const client = new OpenAI({ baseURL: `${gw.publicUrl}/v1`, apiKey: 'none', maxRetries: 0, timeout: 600000 });
  await eventually(async () => (await gw.metric('fleetgate_slots', { model: MODEL, state: 'free' })) >= 64, { timeoutMs: 20000 });
  const idle = status(gw.pid);
  const text = Array.from({ length: LINES }, (_, i) =>
    JSON.stringify({
      custom_id: `tx-${i}`,
      method: 'POST',
      url: '/v1/chat/completions',
      body: { model: MODEL, max_tokens: 1, messages: [{ role: 'user', content: `Transaction ${i}: 3 cards, 2 countries. Risk?` }] },
    }),
  ).join('\n');
  const t0 = Date.now();
  const file = await client.files.create({ file: await toFile(Buffer.from(text), 'big.jsonl'), purpose: 'batch' });
  const batch = await client.batches.create({ input_file_id: file.id, endpoint: '/v1/chat/completions', completion_window: '24h' });
  let last;
  await eventually(
    async () => {
      last = await client.batches.retrieve(batch.id);
      return ['completed', 'failed', 'expired'].includes(last.status);
    },
    { timeoutMs: 3600000, everyMs: 1000 },
  );
  const seconds = (Date.now() - t0) / 1000;
  const end = status(gw.pid);
  console.log(JSON.stringify({
    lines: LINES,
    input_mib: +(Buffer.byteLength(text) / 1048576).toFixed(1),
    status: last.status,
    request_counts: last.request_counts,
    seconds: +seconds.toFixed(1),
    lines_per_second: +(LINES / seconds).toFixed(0),
    rss_idle_mib: +(idle.rss / 1024).toFixed(1),
    rss_peak_mib: +(end.hwm / 1024).toFixed(1),
    rss_end_mib: +(end.rss / 1024).toFixed(1),
  }));
} finally {
  await gw.stop();
  removeDir(dir);
}
