// The status page (GET / on the admin listener) in a real browser: Debian's Chromium, headless,
// driven by puppeteer-core. A gateway over three simulated phones (fleetgate-agent) on 127.0.0.1;
// the page asks for the admin token, then its numbers must match GET /admin/v1/fleet; a phone is
// killed (SIGKILL by PID) and the page must show it unhealthy and its model degraded. A
// screenshot is saved under the build's test-output folder (build/test-output/status/status.png,
// or $FLEETGATE_TEST_OUTPUT/status/status.png) for people to look at.
//
// Chromium comes from ./fleet's TEST_APT_PACKAGES; without it (or puppeteer-core) the test is
// skipped with the reason, never passed.

import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';

import { FLEETGATE_BIN, eventually, startGateway, stopChecked } from './lib/gateway.mjs';
import { startAgent, stopAgent, freePort } from './lib/agent.mjs';
import { ADMIN_TOKEN, FAST_HEALTH, TOKEN_ENV, chat, fleet, replicas } from './lib/lifecycle_util.mjs';

const CHROMIUM = process.env.FLEETGATE_CHROMIUM || '/usr/bin/chromium';
const OUTPUT_DIR = path.join(
  process.env.FLEETGATE_TEST_OUTPUT || path.join(path.dirname(path.dirname(FLEETGATE_BIN)), 'test-output'),
  'status',
);

let puppeteer = null;
let skip = false;
if (!fs.existsSync(CHROMIUM)) {
  skip = `${CHROMIUM} is missing (Debian package chromium; ./fleet test installs it)`;
} else {
  try {
    puppeteer = (await import('puppeteer-core')).default;
  } catch (e) {
    skip = `puppeteer-core is not installed (npm ci in tests/integration): ${e.message}`;
  }
}

const FRAUD = 'qwen3.5-9b-fraud';
const CHAT = 'qwen3.5-4b-chat';

async function startPhone(model) {
  const port = await freePort();
  const agent = await startAgent([
    '--listen', `127.0.0.1:${port}`, '--model', model, '--profile', 'fast-test', '--seed', String(port),
  ]);
  return { agent, url: `http://127.0.0.1:${port}` };
}

// What the page shows in a model's row, cell by cell (data-field attributes).
async function modelRows(page) {
  return page.$$eval('#models tbody tr', (rows) => rows.map((row) => {
    const cells = {};
    for (const c of row.querySelectorAll('[data-field]')) {
      const badge = c.querySelector('.badge');
      cells[c.dataset.field] = badge ? badge.dataset.state : c.textContent.trim();
    }
    return { model: row.dataset.model, ...cells };
  }));
}

async function replicaState(page, id) {
  return page.$eval(`#replicas tr[data-replica="${id}"] [data-field="state"] .badge`, (b) => b.dataset.state)
    .catch(() => undefined);
}

// The page's model rows equal what GET /admin/v1/fleet says (read just before and after, so a
// refresh in between cannot make them differ by chance).
async function pageMatchesFleet(page, gw) {
  const before = await fleet(gw);
  const rows = await modelRows(page);
  const afterwards = await fleet(gw);
  if (JSON.stringify(before) !== JSON.stringify(afterwards)) {
    return false;
  }
  if (rows.length !== before.length) {
    return false;
  }
  for (const m of before) {
    const row = rows.find((r) => r.model === m.model);
    if (!row) {
      return false;
    }
    const expected = {
      healthy: `${m.healthy} / ${m.desired}`,
      registered: String(m.registered),
      slots: `${m.busy_slots} / ${m.busy_slots + m.free_slots}`,
      queue_depth: String(m.queue_depth),
      state: m.healthy === 0 && m.desired > 0 ? 'down' : m.degraded ? 'degraded' : 'ok',
    };
    for (const [k, v] of Object.entries(expected)) {
      if (row[k] !== v) {
        return false;
      }
    }
  }
  return true;
}

describe('the status page in Chromium', { skip }, () => {
  let gw;
  let browser;
  let page;
  const phones = [];

  before(async () => {
    phones.push(await startPhone(FRAUD), await startPhone(FRAUD), await startPhone(CHAT));
    gw = await startGateway({
      admin: { token_env: 'FG_IT_ADMIN_TOKEN' },
      health: FAST_HEALTH,
      models: [
        { name: FRAUD, endpoints: phones.slice(0, 2).map((p) => ({ url: p.url })) },
        { name: CHAT, endpoints: [{ url: phones[2].url }] },
      ],
    }, { env: TOKEN_ENV });
    await eventually(async () => (await replicas(gw)).every((r) => r.state === 'healthy'), {
      timeoutMs: 8000, what: 'the three phones healthy',
    });
    browser = await puppeteer.launch({
      executablePath: CHROMIUM,
      headless: true,
      args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'],
    });
    page = await browser.newPage();
    await page.setViewport({ width: 1400, height: 700 });
  });

  after(async () => {
    await browser?.close();
    for (const p of phones) {
      stopAgent(p.agent);
    }
    await stopChecked(gw);
  });

  test('asks for the admin token, refuses a wrong one, then shows the fleet', async () => {
    await page.goto(`${gw.adminUrl}/`, { waitUntil: 'load' });
    await page.waitForSelector('#login:not([hidden])', { timeout: 5000 });
    await page.type('#token', 'not-the-token');
    await page.click('#login button[type="submit"]');
    await page.waitForFunction(() => document.getElementById('login-error').textContent.includes('refused'), { timeout: 5000 });
    await page.type('#token', ADMIN_TOKEN);
    await page.click('#login button[type="submit"]');
    // Visible, not merely without the hidden attribute: CSS could override it.
    await page.waitForSelector('#models tbody tr', { visible: true, timeout: 5000 });
    await page.waitForSelector('#login', { hidden: true, timeout: 5000 });
    const ids = await page.$$eval('#replicas tbody tr', (rows) => rows.map((r) => r.dataset.replica));
    assert.deepEqual(ids.sort(), (await replicas(gw)).map((r) => r.id).sort());
  });

  test('the numbers match GET /admin/v1/fleet, also with requests in flight', async () => {
    await eventually(() => pageMatchesFleet(page, gw), { timeoutMs: 8000, everyMs: 200, what: 'the page matching /admin/v1/fleet' });
    const rows = await modelRows(page);
    assert.equal(rows.find((r) => r.model === FRAUD).healthy, '2 / 2');
    assert.equal(rows.find((r) => r.model === CHAT).healthy, '1 / 1');
    // Some traffic, so the rates and the chart have something to show.
    for (let i = 0; i < 6; ++i) {
      const res = await chat(gw, i % 2 ? FRAUD : CHAT);
      assert.equal(res.status, 200, res.text);
    }
    await eventually(async () => {
      const requests = await page.$$eval('#replicas [data-field="requests"]', (cells) => cells.map((c) => Number(c.textContent)));
      return requests.reduce((a, b) => a + b, 0) >= 6;
    }, { timeoutMs: 8000, everyMs: 200, what: 'the page counting the 6 requests' });
  });

  test('a killed phone turns unhealthy on the page and its model degraded', async () => {
    const victim = phones[1];
    const id = (await replicas(gw)).find((r) => r.url === victim.url).id;
    assert.equal(await replicaState(page, id), 'healthy');
    process.kill(victim.agent.proc.pid, 'SIGKILL');
    await victim.agent.exited;
    await page.waitForFunction(
      (rid) => document.querySelector(`#replicas tr[data-replica="${rid}"] [data-field="state"] .badge`)?.dataset.state === 'unhealthy',
      { timeout: 10000, polling: 100 },
      id,
    );
    await eventually(() => pageMatchesFleet(page, gw), { timeoutMs: 8000, everyMs: 200, what: 'the page matching /admin/v1/fleet after the kill' });
    const fraud = (await modelRows(page)).find((r) => r.model === FRAUD);
    assert.equal(fraud.healthy, '1 / 2');
    assert.equal(fraud.state, 'degraded');
    assert.equal(await page.$eval('#overall', (b) => b.dataset.state), 'degraded');
    const why = await page.$eval(`#replicas tr[data-replica="${id}"] [data-field="why"]`, (c) => c.textContent);
    assert.ok(why.length > 0, 'the page says why the phone is unhealthy');
    // Readable: the reason wraps into a few lines at most, not a letter a line.
    const box = await (await page.$(`#replicas tr[data-replica="${id}"] [data-field="why"]`)).boundingBox();
    assert.ok(box.width >= 120 && box.height < 80, `the reason's cell is ${box.width} x ${box.height} px`);
    fs.mkdirSync(OUTPUT_DIR, { recursive: true });
    const file = path.join(OUTPUT_DIR, 'status.png');
    await page.screenshot({ path: file, fullPage: true });
    assert.ok(fs.statSync(file).size > 10000, 'a screenshot with something in it');
    console.log(`status page screenshot: ${file}`);
  });
});
