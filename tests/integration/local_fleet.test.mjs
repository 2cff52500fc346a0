// The gateway's local fleet (models[i].local): it starts simulated phones (fleetgate-agent
// processes), proves them with probes, routes over them, restarts one that dies, and stops them
// all when it stops. The official openai client talks to one agent directly, too.

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { createInterface } from 'node:readline';

import { REPO_ROOT, eventually, postJson, request, startGateway, stopChecked } from './lib/gateway.mjs';
import { alive } from './lib/agent.mjs';

const AGENT_BIN = process.env.FLEETGATE_AGENT_BIN || path.join(REPO_ROOT, 'build', 'bin', 'fleetgate-agent');
const MODEL = 'local-m';

async function replicas(gw) {
  const res = await request(`${gw.adminUrl}/admin/v1/replicas`);
  assert.equal(res.status, 200);
  return JSON.parse(res.body).replicas;
}

function agentPids(gw) {
  return gw.logs.filter((l) => l.msg === 'local agent started').map((l) => l.pid);
}

describe('local fleet supervised by the gateway', () => {
  let gw;

  before(async () => {
    gw = await startGateway(
      {
        models: [{ name: MODEL, local: { count: 3, engine: 'sim', profile: 'fast-test', time_scale: 4 } }],
        health: { interval: '300ms', timeout: '200ms' },
      },
      { env: { FLEETGATE_AGENT_BIN: AGENT_BIN } },
    );
  });
  let stopped = false;
  after(async () => {
    if (!stopped) {
      await stopChecked(gw);
    }
  });

  test('starts the agents, proves them healthy and spreads requests over all of them', async () => {
    await eventually(async () => (await replicas(gw)).filter((r) => r.state === 'healthy').length === 3, {
      timeoutMs: 8000,
      what: 'three healthy local replicas',
    });
    const all = await replicas(gw);
    assert.ok(all.every((r) => r.source === 'local' && r.url.startsWith('http://127.0.0.1:')));
    const answers = await Promise.all(
      Array.from({ length: 12 }, () => postJson(gw.publicUrl, '/v1/chat/completions', {
        model: MODEL,
        messages: [{ role: 'user', content: 'is this transaction risky?' }],
      })),
    );
    assert.deepEqual(answers.map((a) => a.status), Array(12).fill(200));
    const served = (await replicas(gw)).map((r) => r.requests);
    assert.ok(served.every((n) => n >= 2), `every phone served some requests: ${served}`);
  });

  test('an agent that dies is restarted and rejoins; requests keep succeeding', async () => {
    const before = await replicas(gw);
    const victim = agentPids(gw)[0];
    assert.ok(alive(victim));
    const restartMark = gw.logs.length;
    process.kill(victim, 'SIGKILL');
    // Requests during the outage still succeed on the others.
    const during = await postJson(gw.publicUrl, '/v1/chat/completions', {
      model: MODEL,
      messages: [{ role: 'user', content: 'still there?' }],
    });
    assert.equal(during.status, 200);
    await eventually(() => gw.logs.slice(restartMark).some((l) => l.msg === 'local agent started'), {
      timeoutMs: 8000,
      what: 'the agent restarted',
    });
    await eventually(async () => (await replicas(gw)).filter((r) => r.state === 'healthy').length === 3, {
      timeoutMs: 8000,
      what: 'the restarted agent healthy again',
    });
    const after = await replicas(gw);
    assert.deepEqual(after.map((r) => r.id).sort(), before.map((r) => r.id).sort(), 'same replicas, same ids');
  });

  test('stopping the gateway stops every agent it started', async () => {
    const pids = [...new Set(agentPids(gw))];
    stopped = true;
    const code = await gw.stop();
    assert.equal(code, 0);
    await eventually(() => pids.every((pid) => !alive(pid)), { timeoutMs: 8000, what: 'all agents gone' });
  });
});

describe('the official openai client against one agent directly', () => {
  let agent;

  before(async () => {
    agent = spawn(AGENT_BIN, ['--listen', '127.0.0.1:0', '--model', MODEL, '--profile', 'fast-test', '--slots', '2'], {
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    const lines = createInterface({ input: agent.stderr });
    agent.address = await new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error('agent did not start')), 5000);
      lines.on('line', (line) => {
        try {
          const entry = JSON.parse(line);
          if (entry.msg === 'listening') {
            clearTimeout(timer);
            resolve(entry.address);
          }
        } catch {
          // not JSON
        }
      });
    });
  });
  after(async () => {
    if (agent && agent.exitCode === null) {
      agent.kill('SIGTERM');
      await once(agent, 'exit');
    }
  });

  test('chat (streamed and not), completions and models parse with the SDK', async () => {
    let OpenAI;
    try {
      OpenAI = (await import('openai')).default;
    } catch (e) {
      throw new Error(`the openai npm package is not installed: run npm ci --prefix tests/integration (${e.message})`);
    }
    const client = new OpenAI({ baseURL: `http://${agent.address}/v1`, apiKey: 'unused', maxRetries: 0 });
    const chat = await client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'hi' }] });
    assert.equal(chat.object, 'chat.completion');
    assert.equal(typeof chat.choices[0].message.content, 'string');
    assert.ok(chat.usage.completion_tokens > 0);

    const stream = await client.chat.completions.create({
      model: MODEL,
      messages: [{ role: 'user', content: 'hi' }],
      stream: true,
      stream_options: { include_usage: true },
    });
    let text = '';
    let usage;
    let finish;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta?.content ?? '';
      finish = chunk.choices[0]?.finish_reason ?? finish;
      usage = chunk.usage ?? usage;
    }
    assert.equal(text, chat.choices[0].message.content, 'same prompt, same deterministic answer');
    assert.ok(finish);
    assert.equal(usage.completion_tokens, chat.usage.completion_tokens);

    const completion = await client.completions.create({ model: MODEL, prompt: 'RISK_LEVEL:' });
    assert.equal(completion.object, 'text_completion');
    const models = await client.models.list();
    assert.deepEqual(models.data.map((m) => m.id), [MODEL]);
  });
});
