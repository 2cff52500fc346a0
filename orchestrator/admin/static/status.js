// The status page: fetches /admin/v1/status every 2 seconds with the admin token (asked for once,
// kept in this tab's sessionStorage) and draws the tables. Text from the gateway is set with
// textContent only, never parsed as HTML.
'use strict';

const REFRESH_MS = 2000;
const TOKEN_KEY = 'fleetgate-admin-token';
const SVG = 'http://www.w3.org/2000/svg';

let timer = null;
let lastOk = 0;

function token() {
  return sessionStorage.getItem(TOKEN_KEY) || '';
}

function el(tag, attrs = {}, text) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    node.setAttribute(k, v);
  }
  if (text !== undefined) {
    node.textContent = text;
  }
  return node;
}

function badge(state) {
  return el('span', { class: 'badge', 'data-state': state }, state);
}

function cell(row, field, text, cls) {
  const td = el('td', { 'data-field': field }, text);
  if (cls) {
    td.className = cls;
  }
  row.appendChild(td);
  return td;
}

function fixed(x, digits = 1) {
  return Number.isFinite(x) ? x.toFixed(digits) : '';
}

function duration(seconds) {
  if (!(seconds > 0)) {
    return '';
  }
  if (seconds < 60) {
    return `${seconds.toFixed(seconds < 10 ? 1 : 0)} s`;
  }
  if (seconds < 3600) {
    return `${Math.floor(seconds / 60)} min ${Math.round(seconds % 60)} s`;
  }
  return `${Math.floor(seconds / 3600)} h ${Math.round((seconds % 3600) / 60)} min`;
}

// Two lines over the last minutes, each scaled to its own maximum (named in the legend).
function chart(history, spanSeconds) {
  const wrap = el('div', { class: 'chart' });
  const w = 220;
  const h = 36;
  const svg = document.createElementNS(SVG, 'svg');
  svg.setAttribute('width', w);
  svg.setAttribute('height', h);
  svg.setAttribute('viewBox', `0 0 ${w} ${h}`);
  svg.setAttribute('role', 'img');
  const maxReq = Math.max(0, ...history.map((p) => p[1]));
  const maxTok = Math.max(0, ...history.map((p) => p[2]));
  const title = document.createElementNS(SVG, 'title');
  title.textContent = `last ${Math.round(spanSeconds / 60)} minutes: up to ${fixed(maxReq)} requests/s and ${fixed(maxTok, 0)} tokens/s`;
  svg.appendChild(title);
  const axis = document.createElementNS(SVG, 'line');
  axis.setAttribute('x1', 0);
  axis.setAttribute('x2', w);
  axis.setAttribute('y1', h - 0.5);
  axis.setAttribute('y2', h - 0.5);
  axis.setAttribute('stroke', '#d4d4d4');
  svg.appendChild(axis);
  for (const [index, cls, max] of [[1, 'requests', maxReq], [2, 'tokens', maxTok]]) {
    if (history.length < 2) {
      break;
    }
    const points = history.map((p) => {
      const x = w - (p[0] / spanSeconds) * w;
      const y = h - 2 - (max > 0 ? (p[index] / max) * (h - 4) : 0);
      return `${x.toFixed(1)},${y.toFixed(1)}`;
    });
    const line = document.createElementNS(SVG, 'polyline');
    line.setAttribute('class', cls);
    line.setAttribute('points', points.join(' '));
    svg.appendChild(line);
  }
  wrap.appendChild(svg);
  const legend = el('div', { class: 'legend' });
  legend.appendChild(el('span', { class: 'requests' }, `\u2014 req/s (max ${fixed(maxReq)})`));
  legend.appendChild(document.createTextNode('  '));
  legend.appendChild(el('span', { class: 'tokens' }, `\u2014 tok/s (max ${fixed(maxTok, 0)})`));
  wrap.appendChild(legend);
  return wrap;
}

function drawModels(status) {
  const body = document.querySelector('#models tbody');
  const span = status.rate_interval_seconds * 150;
  body.replaceChildren();
  for (const m of status.models) {
    const row = el('tr', { 'data-model': m.model });
    const name = el('th', { scope: 'row', 'data-field': 'model' }, m.model);
    row.appendChild(name);
    const state = m.healthy === 0 && m.desired > 0 ? 'down' : m.degraded ? 'degraded' : 'ok';
    cell(row, 'state', '').appendChild(badge(state));
    cell(row, 'healthy', `${m.healthy} / ${m.desired}`, 'num');
    cell(row, 'registered', String(m.registered), 'num');
    cell(row, 'slots', `${m.busy_slots} / ${m.busy_slots + m.free_slots}`, 'num');
    cell(row, 'queue_depth', String(m.queue_depth), 'num');
    cell(row, 'oldest_wait', duration(m.oldest_queued_seconds) || '\u2014', 'num');
    cell(row, 'requests_per_second', fixed(m.requests_per_second), 'num');
    cell(row, 'tokens_per_second', fixed(m.tokens_per_second, 0), 'num');
    cell(row, 'chart', '').appendChild(chart(m.history, span));
    body.appendChild(row);
  }
}

function drawReplicas(status) {
  const table = document.querySelector('#replicas');
  const body = table.querySelector('tbody');
  body.replaceChildren();
  // The speed column only when the scheduler knows a speed for some replica.
  const anySpeed = status.replicas.some((r) => r.speeds);
  table.classList.toggle('hidden-column', !anySpeed);
  for (const r of status.replicas) {
    const row = el('tr', { 'data-replica': r.id });
    row.appendChild(el('th', { scope: 'row', 'data-field': 'id' }, r.id));
    cell(row, 'model', r.model);
    const state = r.removing ? 'gone' : r.state;
    cell(row, 'state', '').appendChild(badge(state));
    cell(row, 'why', r.state_reason ? `${r.state_reason} (${duration(r.state_seconds) || 'now'} ago)` : '', 'why');
    cell(row, 'slots', `${r.in_flight} / ${r.slots}`, 'num');
    const speed = r.speeds
      ? `${fixed(r.speeds.prefill_tokens_per_second, 0)} / ${fixed(r.speeds.decode_tokens_per_second, 1)} (${r.speeds.source})`
      : '\u2014';
    cell(row, 'speed', speed, 'num speed');
    cell(row, 'answer_tokens_per_second', r.tokens_per_second > 0 ? fixed(r.tokens_per_second) : '\u2014', 'num');
    cell(row, 'requests', String(r.requests), 'num');
    cell(row, 'failures', String(r.failures), 'num');
    cell(row, 'last_error', r.last_probe_error || '', 'error');
    cell(row, 'source', r.registered && r.agent_version ? `${r.source}, agent ${r.agent_version}` : r.source);
    body.appendChild(row);
  }
}

function draw(status) {
  document.getElementById('version').textContent = status.version;
  const overall = document.getElementById('overall');
  const down = status.models.some((m) => m.healthy === 0 && m.desired > 0);
  const state = down ? 'down' : status.degraded ? 'degraded' : 'ok';
  overall.dataset.state = state;
  overall.textContent = state === 'ok' ? 'ok: every model has its replicas' : state === 'degraded' ? 'degraded: fewer healthy replicas than desired' : 'down: a model has no healthy replica';
  drawModels(status);
  drawReplicas(status);
  const updated = document.getElementById('updated');
  updated.classList.remove('stale');
  updated.textContent = `Updated ${new Date().toLocaleTimeString()} (gateway time ${status.time})`;
}

function showLogin(message) {
  document.getElementById('content').hidden = true;
  const form = document.getElementById('login');
  form.hidden = false;
  const error = document.getElementById('login-error');
  error.hidden = !message;
  error.textContent = message || '';
  document.getElementById('token').focus();
}

async function refresh() {
  clearTimeout(timer);
  const headers = { Accept: 'application/json' };
  if (token()) {
    headers.Authorization = `Bearer ${token()}`;
  }
  try {
    const res = await fetch('/admin/v1/status', { headers, cache: 'no-store', credentials: 'omit' });
    if (res.status === 401) {
      showLogin(token() ? 'That token was refused.' : '');
      sessionStorage.removeItem(TOKEN_KEY);
      return;
    }
    if (!res.ok) {
      throw new Error(`HTTP ${res.status}`);
    }
    const status = await res.json();
    document.getElementById('login').hidden = true;
    document.getElementById('content').hidden = false;
    draw(status);
    lastOk = Date.now();
  } catch (e) {
    const updated = document.getElementById('updated');
    updated.classList.add('stale');
    const age = lastOk ? ` (last answer ${Math.round((Date.now() - lastOk) / 1000)} s ago)` : '';
    updated.textContent = `Cannot reach the gateway: ${e.message}${age}`;
  }
  timer = setTimeout(refresh, REFRESH_MS);
}

document.addEventListener('DOMContentLoaded', () => {
  document.getElementById('login').addEventListener('submit', (event) => {
    event.preventDefault();
    sessionStorage.setItem(TOKEN_KEY, document.getElementById('token').value);
    document.getElementById('token').value = '';
    refresh();
  });
  refresh();
});
