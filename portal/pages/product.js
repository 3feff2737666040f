// One product: its APIs with their endpoints and, for a streaming API, its channels with
// copyable curl and EventSource examples and its AsyncAPI document to download.

import { call, catalogue, path } from '../api.js';
import { state } from '../app.js';
import { announce, button, h, heading, notice } from '/console/ui.js';

/** A code block with a copy button. */
function snippet(label, text) {
  const copy = button('Copy', async () => {
    try {
      await navigator.clipboard.writeText(text);
      announce(`${label} copied.`);
    } catch {
      announce('Copying is not allowed here: select the text instead.');
    }
  }, { class: 'small secondary', 'aria-label': `Copy ${label}` });
  return h('div', { class: 'snippet' }, h('pre', { 'aria-label': label }, h('code', {}, text)), copy);
}

/** `text` as one single-quoted shell word, whatever it holds. */
function shellWord(text) {
  return `'${text.replace(/'/g, "'\\''")}'`;
}

/** `text` as a JavaScript string literal. */
function jsString(text) {
  return JSON.stringify(text);
}

/** The full URL of a channel of the AsyncAPI document. */
function channelUrl(doc, channel) {
  const ref = (channel.servers && channel.servers[0] && channel.servers[0].$ref) || '';
  const server = doc.servers[ref.split('/').pop()] || {};
  return `${server.protocol}://${server.host}${server.pathname || ''}${channel.address || ''}`;
}

/** What a client does with one operation of the document, with examples. */
function operation(doc, id, op) {
  const key = (op.channel.$ref || '').split('/').pop();
  const channel = doc.channels[key] || {};
  const url = channelUrl(doc, channel);
  const ws = channel.bindings && channel.bindings.ws;
  const method = op.bindings && op.bindings.http && op.bindings.http.method;
  const parts = [h('h4', {}, h('code', {}, channel.address || '(any path)'), ' ', h('span', { class: 'badge info' }, ws ? 'WebSocket' : (method || 'broker')))];
  if (channel.description) parts.push(h('p', {}, channel.description));
  if (ws) {
    parts.push(snippet(`WebSocket example for ${channel.address}`,
      `const socket = new WebSocket(${jsString(url)});\nsocket.onmessage = (event) => console.log(event.data);\nsocket.onopen = () => socket.send(JSON.stringify({ hello: 'world' }));`));
  } else if (op.action === 'receive' && method) {
    parts.push(snippet(`curl example for ${channel.address}`,
      `curl -X ${method} ${shellWord(url)} \\\n  -H "Authorization: $SLUICE_KEY" \\\n  -H 'Content-Type: application/json' \\\n  -d '{"hello": "world"}'`));
  } else if (op.action === 'send' && method === 'GET') {
    parts.push(snippet(`curl example for ${channel.address}`,
      `curl -N ${shellWord(url)} \\\n  -H "Authorization: $SLUICE_KEY" \\\n  -H 'Accept: text/event-stream'`));
    parts.push(snippet(`EventSource example for ${channel.address}`,
      `// EventSource sends no headers: the API must take the key another way\n// (a query parameter or a cookie), or read the stream with fetch.\nconst events = new EventSource(${jsString(url)});\nevents.onmessage = (event) => console.log(JSON.parse(event.data));`));
  }
  return h('div', { class: 'channel', 'data-operation': id }, parts);
}

async function streamingApi(product, api) {
  const section = h('div', {}, h('p', { class: 'loading' }, 'Loading its channels\u2026'));
  try {
    const doc = await call('GET', `/products/${encodeURIComponent(product.id)}/apis/${encodeURIComponent(api.id)}/asyncapi`);
    const blob = new Blob([JSON.stringify(doc, null, 2)], { type: 'application/json' });
    const download = h('a', { href: URL.createObjectURL(blob), download: `${api.id}.asyncapi.json`, class: 'button secondary' }, 'Download the AsyncAPI document');
    const ops = Object.entries(doc.operations || {})
      .filter(([, op]) => {
        // Channels clients reach at the gateway; the portal's own webhook deliveries
        // (no address) are the subscriptions' business.
        const key = (op.channel.$ref || '').split('/').pop();
        const channel = doc.channels[key] || {};
        const ref = (channel.servers || [{}])[0].$ref || '';
        return ref.startsWith('#/servers/gateway') && Boolean(channel.address);
      });
    section.replaceChildren(
      h('p', {}, download, ' ', h('a', { href: path(`/products/${encodeURIComponent(product.id)}/apis/${encodeURIComponent(api.id)}/asyncapi`) }, 'AsyncAPI 3.0 (JSON)')),
      ...(ops.length ? ops.map(([id, op]) => operation(doc, id, op)) : [notice('info', 'This API has no channels clients reach through the gateway.')]));
  } catch (e) {
    section.replaceChildren(notice('error', `Its AsyncAPI document could not be read: ${e.message}`));
  }
  return section;
}

function plainApi(api) {
  if (!api.endpoints.length) return h('p', {}, 'Its document lists no operations.');
  return h('ul', {}, api.endpoints.map((e) => h('li', {},
    h('code', {}, `${e.method} ${api.listen_path.replace(/\/$/, '')}${e.path}`), e.summary ? ` \u2013 ${e.summary}` : '')));
}

export async function render(view, id) {
  const product = (await catalogue()).find((p) => p.id === id);
  if (!product) {
    view.replaceChildren(heading('Not found'), notice('error', 'No such product is published here.'), h('p', {}, h('a', { href: '#/' }, 'Back to the APIs')));
    return;
  }
  const apis = [];
  for (const api of product.apis) {
    apis.push(h('section', { class: 'card' },
      h('h2', {}, api.name, api.streaming ? h('span', { class: 'badge info' }, 'streaming') : null),
      h('p', {}, 'Served at ', h('code', {}, api.listen_path)),
      api.streaming ? await streamingApi(product, api) : plainApi(api)));
  }
  const access = state.developer
    ? h('p', {}, h('a', { href: '#/apps' }, 'Make an app'), ` to get a key${product.key_approval === 'manual' ? ' (the publisher approves each request first)' : ''}.`)
    : h('p', {}, h('a', { href: '#/signin' }, 'Sign in'), ' to get a key for these APIs.');
  view.replaceChildren(
    heading(product.name),
    product.description ? h('p', {}, product.description) : '',
    access,
    product.events.length
      ? h('p', {}, 'Webhook events: ', product.events.map((e, i) => [i ? ', ' : '', h('code', {}, e)]))
      : '',
    ...apis);
}
