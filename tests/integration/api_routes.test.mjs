// The Responses, Anthropic Messages, token-count and rerank routes end to end, with the clients
// people use (the openai npm client, the Anthropic TypeScript SDK, the Vercel AI SDK's default
// `openai(model)` provider), through the gateway to simulated phones (fleetgate-agent, sim engine).

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { startAgent, stopAgent } from './lib/agent.mjs';
import { eventually, metricValue, postJson, request, startGateway, stopChecked } from './lib/gateway.mjs';

const MODEL = 'qwen3.5-0.8b';
const KEY = 'sk-routes-test';
const PROMPT = 'Transaction 4411: 3 cards, 2 countries, 5 minutes. Risk?';

describe('every API through the one URL (simulated phones)', () => {
  let agents = [];
  let gw;
  let OpenAI;
  let Anthropic;
  let openaiClient;
  let anthropicClient;

  before(async () => {
    OpenAI = (await import('openai')).default;
    Anthropic = (await import('@anthropic-ai/sdk')).default;
    for (let i = 0; i < 2; ++i) {
      agents.push(await startAgent(['--listen', '127.0.0.1:0', '--model', MODEL, '--profile', 'fast-test',
        '--slots', '2', '--time-scale', '20']));
    }
    gw = await startGateway({
      server: { api_keys_env: 'FG_IT_ROUTES_KEYS' },
      // 'idle' has no replica: its requests wait out the queue timeout (and streams get
      // keep-alive comments first), so the queue's refusals can be seen in each API's shape.
      models: [{ name: MODEL, endpoints: agents.map((a) => a.base) }, { name: 'idle', endpoints: [] }],
      routing: { queue_timeout: '400ms', keepalive_interval: '100ms' },
    }, { env: { FG_IT_ROUTES_KEYS: KEY } });
    await eventually(async () => {
      const res = await postJson(gw.publicUrl, '/v1/chat/completions', { model: MODEL, messages: [{ role: 'user', content: 'x' }] },
        { headers: { Authorization: `Bearer ${KEY}` } });
      return res.status === 200;
    }, { timeoutMs: 8000, what: 'a routable replica' });
    openaiClient = new OpenAI({ baseURL: `${gw.publicUrl}/v1`, apiKey: KEY, maxRetries: 0, timeout: 15000 });
    anthropicClient = new Anthropic({ baseURL: gw.publicUrl, apiKey: KEY, maxRetries: 0, timeout: 15000 });
  });
  after(async () => {
    await stopChecked(gw);
    for (const a of agents) {
      stopAgent(a);
    }
  });

  const metrics = async () => (await request(`${gw.adminUrl}/metrics`)).text;

  test('openai client: responses.create, whole', async () => {
    const before = metricValue(await metrics(), 'fleetgate_tokens_total', { model: MODEL, api: 'responses', kind: 'prompt' }) ?? 0;
    const response = await openaiClient.responses.create({ model: MODEL, input: PROMPT, max_output_tokens: 6 });
    assert.equal(response.object, 'response');
    assert.match(response.id, /^resp_/);
    assert.ok(response.output_text.length > 0, 'the SDK assembles output_text');
    assert.ok(response.usage.input_tokens > 0);
    assert.ok(response.usage.output_tokens > 0 && response.usage.output_tokens <= 6);
    const text = await metrics();
    assert.equal(metricValue(text, 'fleetgate_tokens_total', { model: MODEL, api: 'responses', kind: 'prompt' }),
      before + response.usage.input_tokens, 'usage.input_tokens counted under api="responses"');
    assert.ok(metricValue(text, 'fleetgate_requests_total', { model: MODEL, api: 'responses', endpoint: '/v1/responses', code: '200' }) >= 1);
  });

  test('openai client: responses.create, streaming typed events ending in response.completed', async () => {
    const stream = await openaiClient.responses.create({ model: MODEL, input: [{ role: 'user', content: PROMPT }], stream: true });
    const types = [];
    let text = '';
    let completed;
    for await (const event of stream) {
      types.push(event.type);
      if (event.type === 'response.output_text.delta') {
        text += event.delta;
      }
      if (event.type === 'response.completed') {
        completed = event.response;
      }
    }
    assert.deepEqual(types.slice(0, 4), ['response.created', 'response.in_progress', 'response.output_item.added', 'response.content_part.added']);
    assert.equal(types.at(-1), 'response.completed');
    assert.ok(types.includes('response.output_text.delta'));
    assert.ok(text.length > 0);
    assert.equal(completed.output[0].content[0].text, text);
    assert.ok(completed.usage.input_tokens > 0 && completed.usage.output_tokens > 0);
  });

  test('Responses requests that need server-side state are refused with 400, saying why', async () => {
    for (const extra of [{ store: true }, { previous_response_id: 'resp_abc' }]) {
      await assert.rejects(openaiClient.responses.create({ model: MODEL, input: 'hi', ...extra }), (e) => {
        assert.equal(e.status, 400);
        assert.equal(e.code, 'unsupported_stateful_request');
        assert.match(e.message, /no replica/);
        return true;
      });
    }
    const res = await postJson(gw.publicUrl, '/v1/responses/input_tokens', { model: MODEL, input: PROMPT },
      { headers: { Authorization: `Bearer ${KEY}` } });
    assert.equal(res.status, 200);
    assert.equal(res.json.object, 'response.input_tokens');
    assert.equal(res.json.input_tokens, Math.ceil(PROMPT.length / 4));
  });

  test('Anthropic SDK: messages.create with x-api-key, and count_tokens', async () => {
    const message = await anthropicClient.messages.create({
      model: MODEL, max_tokens: 5, system: 'You review fraud.', messages: [{ role: 'user', content: PROMPT }],
    });
    assert.equal(message.type, 'message');
    assert.equal(message.role, 'assistant');
    assert.equal(message.content[0].type, 'text');
    assert.ok(message.content[0].text.length > 0);
    assert.ok(['end_turn', 'max_tokens'].includes(message.stop_reason));
    assert.ok(message.usage.input_tokens > 0 && message.usage.output_tokens <= 5);
    const count = await anthropicClient.messages.countTokens({ model: MODEL, messages: [{ role: 'user', content: PROMPT }] });
    assert.equal(count.input_tokens, Math.ceil(PROMPT.length / 4));
  });

  test('Anthropic SDK: messages.stream, events in order and usage counted', async () => {
    const before = metricValue(await metrics(), 'fleetgate_tokens_total', { model: MODEL, api: 'messages', kind: 'completion' }) ?? 0;
    const stream = anthropicClient.messages.stream({ model: MODEL, max_tokens: 8, messages: [{ role: 'user', content: PROMPT }] });
    const types = [];
    stream.on('streamEvent', (e) => types.push(e.type));
    let text = '';
    stream.on('text', (t) => { text += t; });
    const final = await stream.finalMessage();
    assert.equal(types[0], 'message_start');
    assert.equal(types[1], 'content_block_start');
    assert.ok(types.includes('content_block_delta'));
    assert.deepEqual(types.slice(-3), ['content_block_stop', 'message_delta', 'message_stop']);
    assert.equal(final.content[0].text, text);
    assert.ok(final.usage.output_tokens > 0);
    await eventually(async () => metricValue(await metrics(), 'fleetgate_tokens_total', { model: MODEL, api: 'messages', kind: 'completion' }) === before + final.usage.output_tokens,
      { what: 'message_delta output_tokens counted under api="messages"' });
  });

  test('Anthropic errors keep Anthropic shape: wrong key, unknown model, bad request', async () => {
    const wrong = new Anthropic({ baseURL: gw.publicUrl, apiKey: 'sk-wrong', maxRetries: 0 });
    await assert.rejects(wrong.messages.create({ model: MODEL, max_tokens: 4, messages: [{ role: 'user', content: 'x' }] }),
      (e) => e instanceof Anthropic.AuthenticationError && e.error?.type === 'error' && e.error.error.type === 'authentication_error');
    await assert.rejects(anthropicClient.messages.create({ model: 'no-such-model', max_tokens: 4, messages: [{ role: 'user', content: 'x' }] }),
      (e) => e instanceof Anthropic.NotFoundError && e.error.error.type === 'not_found_error' && /no-such-model/.test(e.error.error.message));
    // The phone refuses an empty conversation (an OpenAI error from the engine): reshaped.
    const res = await postJson(gw.publicUrl, '/v1/messages', { model: MODEL, max_tokens: 4, messages: [] }, { headers: { 'x-api-key': KEY } });
    assert.equal(res.status, 400);
    assert.equal(res.json.type, 'error');
    assert.equal(res.json.error.type, 'invalid_request_error');
    assert.match(res.json.error.message, /messages/);
  });

  test('queue refusals keep each API\'s shape, over HTTP and as the event that ends a begun stream', async () => {
    // Whole: 503 after the queue timeout.
    await assert.rejects(anthropicClient.messages.create({ model: 'idle', max_tokens: 4, messages: [{ role: 'user', content: 'x' }] }),
      (e) => e.status === 503 && e.error?.type === 'error' && e.error.error.type === 'overloaded_error' && /queue_timeout|became free/.test(e.error.error.message));
    await assert.rejects(openaiClient.responses.create({ model: 'idle', input: 'x' }),
      (e) => e.status === 503 && e.code === 'queue_timeout');
    // Streams: keep-alive comments opened a 200 stream, so the refusal is the API's error event.
    const anthropicStream = anthropicClient.messages.stream({ model: 'idle', max_tokens: 4, messages: [{ role: 'user', content: 'x' }] });
    await assert.rejects(anthropicStream.finalMessage(), (e) => {
      assert.equal(e.error?.error?.type, 'overloaded_error', `Anthropic error event: ${JSON.stringify(e.error)}`);
      return true;
    });
    const raw = await postJson(gw.publicUrl, '/v1/responses', { model: 'idle', input: 'x', stream: true }, { headers: { Authorization: `Bearer ${KEY}` } });
    assert.equal(raw.status, 200);
    assert.match(raw.text, /^: keep-alive/m);
    assert.match(raw.text, /^event: error\ndata: \{"type":"error","sequence_number":0,"error":\{"type":"server_error","code":"queue_timeout"/m);
    const responsesStream = await openaiClient.responses.create({ model: 'idle', input: 'x', stream: true });
    await assert.rejects((async () => {
      for await (const event of responsesStream) {
        assert.fail(`no event expected, got ${event.type}`);
      }
    })(), (e) => /became free|queue_timeout/.test(e.message));
  });

  test('Vercel AI SDK default openai(model): generateText and streamText use /v1/responses', async () => {
    const { generateText, streamText } = await import('ai');
    const { createOpenAI } = await import('@ai-sdk/openai');
    const provider = createOpenAI({ baseURL: `${gw.publicUrl}/v1`, apiKey: KEY });
    const before = metricValue(await metrics(), 'fleetgate_requests_total', { model: MODEL, api: 'responses', endpoint: '/v1/responses', code: '200' }) ?? 0;
    const generated = await generateText({ model: provider(MODEL), prompt: PROMPT, maxOutputTokens: 6, maxRetries: 0 });
    assert.ok(generated.text.length > 0);
    assert.ok(generated.usage.inputTokens > 0);
    const streamed = streamText({ model: provider(MODEL), prompt: PROMPT, maxOutputTokens: 6, maxRetries: 0 });
    let text = '';
    for await (const piece of streamed.textStream) {
      text += piece;
    }
    assert.ok(text.length > 0);
    assert.ok((await streamed.usage).outputTokens > 0);
    assert.equal(await streamed.finishReason === 'error', false);
    const after = metricValue(await metrics(), 'fleetgate_requests_total', { model: MODEL, api: 'responses', endpoint: '/v1/responses', code: '200' });
    assert.equal(after, before + 2, 'both calls went to /v1/responses');
  });

  test('rerank: the matching document ranks first', async () => {
    const res = await postJson(gw.publicUrl, '/v1/rerank', {
      model: MODEL, query: 'card fraud refund', documents: ['the weather is nice', 'a refund claim after card fraud', 'fraud'],
    }, { headers: { Authorization: `Bearer ${KEY}` } });
    assert.equal(res.status, 200);
    assert.deepEqual(res.json.results.map((r) => r.index), [1, 2, 0]);
    assert.ok(res.json.usage.prompt_tokens > 0);
  });
});
