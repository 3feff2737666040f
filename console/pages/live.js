// A streaming API's live view: each stream's graph (inputs, processors, outputs as
// boxes, channels as arrows) with per-node rates and error counts read every second,
// a small chart of the last five minutes per node, and the clients connected to its
// routes. The numbers come from `GET /api/apis/streams/{id}/live`. A stream's tail (a
// sample of what it delivered) is opt-in: it is read only while its switch is on.

import { call } from '../api.js';
import { button, h, heading, notice, show } from '../ui.js';

const PERIOD_MS = 1000;
const HISTORY = 300; // samples: five minutes at one a second

export async function render(view, id) {
  const status = h('div', { id: 'live-status' });
  const streams = h('div', { id: 'live-streams' });
  const keys = h('section', { class: 'card', id: 'live-keys', 'aria-labelledby': 'live-keys-title' },
    h('h2', { id: 'live-keys-title' }, 'Open clients by key'),
    h('table', {}, h('thead', {}, h('tr', {}, h('th', {}, 'Key'), h('th', {}, 'Connections'))), h('tbody', {})));
  view.replaceChildren(
    heading(`Live: ${id}`),
    h('p', {}, h('a', { href: '#/apis' }, 'Back to the APIs')),
    status,
    keys,
    streams);
  const history = new Map(); // node key -> {last, sent: [rates], received: [rates]}
  let first = true;
  const tick = async () => {
    if (!view.isConnected) return false;
    let live;
    try {
      live = await call('GET', `/api/apis/streams/${encodeURIComponent(id)}/live`);
    } catch (e) {
      show(status, notice('error', `The live view could not be read: ${e.message}`));
      return true;
    }
    show(status, live.running_here
      ? null
      : notice('info', 'These streams do not run in the dashboard\u2019s process (run `sluice serve` to see their counters here): the graph is the definition\u2019s.'));
    if (first) {
      streams.replaceChildren(...live.streams.map((s) => streamCard(s, id, live.running_here)));
      first = false;
    }
    showKeys(keys, live.keys || []);
    for (const stream of live.streams) update(streams, stream, live.at, history);
    try {
      const health = await call('GET', `/api/apis/streams/${encodeURIComponent(id)}/status`);
      for (const s of health.streams) showHealth(streams, s);
    } catch {
      // The counters still show; the states come back at the next tick.
    }
    return true;
  };
  await tick();
  const timer = setInterval(async () => {
    if (!(await tick())) clearInterval(timer);
  }, PERIOD_MS);
}

// The stream connections open on the API, by the key that let each in.
function showKeys(section, keys) {
  const body = section.querySelector('tbody');
  body.replaceChildren(...(keys.length
    ? keys.map((k) => h('tr', {},
      h('td', {}, k.key_id == null ? h('em', {}, 'no key') : h('code', {}, k.key_id)),
      h('td', { class: 'connections' }, String(k.connections))))
    : [h('tr', {}, h('td', { colspan: '2' }, 'None.'))]));
}

const key = (stream, node) => `${stream}\u0000${node.component}`;

function streamCard(stream, apiId, running) {
  const graph = h('ol', { class: 'graph', 'aria-label': `Graph of stream ${stream.name}` });
  stream.nodes.forEach((node, i) => {
    if (i > 0) graph.append(h('li', { class: 'arrow', 'aria-hidden': 'true' }, '\u2192'));
    graph.append(h('li', { class: `node ${node.kind}`, 'data-node': key(stream.name, node) },
      h('span', { class: 'node-kind' }, node.kind),
      h('strong', {}, node.type),
      h('code', { class: 'node-name' }, node.component),
      h('dl', {},
        h('dt', {}, 'in/s'), h('dd', { class: 'rate-in' }, '\u2013'),
        h('dt', {}, 'out/s'), h('dd', { class: 'rate-out' }, '\u2013'),
        h('dt', {}, 'errors'), h('dd', { class: 'errors' }, String(node.errors)),
        node.kind === 'input' ? [h('dt', {}, 'lag'), h('dd', { class: 'lag' }, node.lag == null ? '\u2013' : String(node.lag))] : null),
      chart()));
  });
  return h('section', { class: 'card live-stream', 'data-stream': stream.name, 'aria-labelledby': `stream-${stream.name}` },
    h('h2', { id: `stream-${stream.name}` }, stream.name, ' ', h('span', { class: 'badge off stream-state' }, '\u2026')),
    h('p', { class: 'stream-error', hidden: true }),
    graph,
    h('h3', {}, 'Connected clients'),
    h('ul', { class: 'clients' }),
    running ? tailSection(apiId, stream.name) : null);
}

/** The opt-in tail: while on, the latest sampled messages, newest first, read every second. */
function tailSection(apiId, name) {
  const list = h('ol', { class: 'tail', 'aria-label': `Messages of stream ${name}`, 'aria-live': 'polite' });
  const status = h('div', {});
  let after = 0;
  let timer = null;
  const read = async () => {
    if (!list.isConnected) {
      clearInterval(timer);
      return;
    }
    try {
      const tail = await call('POST', `/api/apis/streams/${encodeURIComponent(apiId)}/tail`, { query: { stream: name, after } });
      for (const m of tail.messages) {
        after = Math.max(after, m.seq);
        const meta = Object.entries(m.metadata).map(([k, v]) => `${k}: ${v}`).join('\n');
        list.prepend(h('li', {},
          h('time', { datetime: m.at }, m.at.slice(11, 23)),
          h('pre', { class: 'code output' }, m.payload + (m.truncated ? ' \u2026' : '')),
          meta ? h('details', {}, h('summary', {}, 'Metadata'), h('pre', { class: 'code output' }, meta)) : null));
      }
      while (list.children.length > 50) list.lastChild.remove();
      show(status, null);
    } catch (e) {
      show(status, notice('error', `The tail could not be read: ${e.message}`));
    }
  };
  const toggle = button('Start tail', () => {
    if (timer) {
      clearInterval(timer);
      timer = null;
      toggle.textContent = 'Start tail';
      toggle.setAttribute('aria-pressed', 'false');
      return;
    }
    read();
    timer = setInterval(read, PERIOD_MS);
    toggle.textContent = 'Stop tail';
    toggle.setAttribute('aria-pressed', 'true');
  }, { class: 'small secondary', 'aria-pressed': 'false', 'aria-label': `Tail of stream ${name}` });
  return h('div', { class: 'tail-section' },
    h('h3', {}, 'Tail'),
    h('p', { class: 'hint' }, 'A sample of what the stream delivers (at most ten messages a second, the last 50 kept), taken only while the tail is on. Credentials in metadata read ***.'),
    toggle,
    status,
    list);
}

function chart() {
  const ns = 'http://www.w3.org/2000/svg';
  const svg = document.createElementNS(ns, 'svg');
  svg.setAttribute('viewBox', `0 0 ${HISTORY} 40`);
  svg.setAttribute('preserveAspectRatio', 'none');
  svg.setAttribute('class', 'spark');
  svg.setAttribute('role', 'img');
  svg.setAttribute('aria-label', 'Messages out per second, last five minutes');
  const line = document.createElementNS(ns, 'polyline');
  line.setAttribute('fill', 'none');
  svg.append(line);
  return svg;
}

const STATE_BADGE = { running: 'ok', starting: 'info', failing: 'bad', stopped: 'warn' };

/** A stream's state by its name, and its last error while it is failing or stopped. */
function showHealth(root, status) {
  const card = [...root.querySelectorAll('.live-stream')].find((c) => c.dataset.stream === status.name);
  if (!card) return;
  const badge = card.querySelector('.stream-state');
  badge.textContent = status.state.replace('_', ' ');
  badge.className = `badge ${STATE_BADGE[status.state] || 'off'} stream-state`;
  const error = card.querySelector('.stream-error');
  const health = status.health;
  const failed = health && health.last_error && (status.state === 'failing' || status.state === 'stopped');
  error.hidden = !failed;
  error.textContent = failed ? `${health.last_error} (failures: ${health.failures}, recoveries: ${health.recoveries})` : '';
}

function update(root, stream, at, history) {
  const card = [...root.querySelectorAll('.live-stream')].find((c) => c.dataset.stream === stream.name);
  if (!card) return;
  for (const node of stream.nodes) {
    const k = key(stream.name, node);
    const box = [...card.querySelectorAll('.node')].find((b) => b.dataset.node === k);
    if (!box) continue;
    const past = history.get(k) || { last: null, out: [] };
    let rateIn = null;
    let rateOut = null;
    if (past.last && at > past.last.at) {
      const secs = (at - past.last.at) / 1000;
      rateIn = Math.max(0, (node.received - past.last.received) / secs);
      rateOut = Math.max(0, (node.sent - past.last.sent) / secs);
      past.out.push(rateOut);
      if (past.out.length > HISTORY) past.out.shift();
    }
    past.last = { at, received: node.received, sent: node.sent };
    history.set(k, past);
    box.querySelector('.rate-in').textContent = rateIn === null ? '\u2013' : format(rateIn);
    box.querySelector('.rate-out').textContent = rateOut === null ? '\u2013' : format(rateOut);
    box.querySelector('.errors').textContent = String(node.errors);
    const lag = box.querySelector('.lag');
    if (lag) lag.textContent = node.lag == null ? '\u2013' : String(node.lag);
    box.classList.toggle('failing', node.errors > 0);
    draw(box.querySelector('polyline'), past.out);
  }
  const clients = card.querySelector('.clients');
  clients.replaceChildren(...(stream.clients.length
    ? stream.clients.map((c) => h('li', {}, h('code', {}, c.route), ` ${c.transport}: `, h('strong', { class: 'connections' }, String(c.connections))))
    : [h('li', {}, 'None.')]));
}

function draw(line, values) {
  const top = Math.max(1, ...values);
  const offset = HISTORY - values.length;
  line.setAttribute('points', values.map((v, i) => `${offset + i},${(40 - (v / top) * 38).toFixed(1)}`).join(' '));
}

function format(rate) {
  return rate >= 100 ? Math.round(rate).toLocaleString('en') : rate.toFixed(1);
}
