// The chaos suite's terminal-answer check must catch what it claims to: a tiny server on
// 127.0.0.1 answers in each wrong way (a relayed 1xx, two answers, bytes after [DONE], a stream
// without [DONE], a cut body, a hang, a 5xx that is not an OpenAI error) and the check must name
// the violation; a correct answer and a correct stream must pass.

import assert from 'node:assert/strict';
import net from 'node:net';
import { after, before, describe, test } from 'node:test';

import { terminalAnswer } from './lib/invariants.mjs';

const json = (status, body) => `HTTP/1.1 ${status} X\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`;
const sse = (body) => `HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n${body.length.toString(16)}\r\n${body}\r\n0\r\n\r\n`;
const OK = '{"choices":[]}';
const ERROR = '{"error":{"message":"m","type":"server_error","param":null,"code":"x"}}';

// path -> [bytes to answer, whether to close after]
const ANSWERS = {
  '/good': [json(200, OK), true],
  '/good-stream': [sse(`data: ${OK}\n\ndata: ${ERROR}\n\ndata: [DONE]\n\n`), true],
  '/interim': [`HTTP/1.1 100 Continue\r\n\r\n`, true],
  '/two': [json(200, OK) + json(200, OK), true],
  '/after-done': [sse(`data: ${OK}\n\ndata: [DONE]\n\n: keep-alive\n\n`), true],
  '/no-done': [sse(`data: ${OK}\n\n`), true],
  '/cut': [json(200, OK).slice(0, -3), true],
  '/hang': [json(200, OK).slice(0, -3), false],
  '/bad-error': [json(502, 'Bad Gateway'), true],
};

describe('the terminal-answer check', () => {
  let server;
  let url;

  before(async () => {
    server = net.createServer((socket) => {
      let head = '';
      socket.on('data', (d) => {
        head += d.toString('latin1');
        if (!head.includes('\r\n\r\n')) {
          return;
        }
        const path = head.split(' ')[1];
        const [bytes, close] = ANSWERS[path];
        socket.write(bytes, () => close && socket.end());
      });
      socket.on('error', () => {});
    });
    await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
    url = `http://127.0.0.1:${server.address().port}`;
  });
  after(() => new Promise((resolve) => server.close(() => resolve())));

  const check = (path, deadlineMs = 2000) => terminalAnswer(url, path, undefined, { method: 'GET', deadlineMs });

  test('passes a complete answer and a stream ending in an error event and [DONE]', async () => {
    assert.deepEqual((await check('/good')).violations, []);
    assert.deepEqual((await check('/good-stream')).violations, []);
  });

  const cases = [
    ['/interim', /status 100/],
    ['/two', /bytes after the answer/],
    ['/after-done', /after \[DONE\]/],
    ['/no-done', /0 \[DONE\]/],
    ['/cut', /incomplete answer/],
    ['/hang', /no terminal answer within/],
    ['/bad-error', /not parse|OpenAI error/],
  ];
  for (const [path, expected] of cases) {
    test(`catches ${path}`, async () => {
      const r = await check(path, path === '/hang' ? 500 : 2000);
      assert.ok(r.violations.some((v) => expected.test(v)), `${path}: ${JSON.stringify(r.violations)}`);
    });
  }
});
