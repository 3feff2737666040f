// Webhooks: the organisation's webhook definitions (list, create, delete) and the
// delivery log with a replay for dead deliveries. The log's endpoints are optional: a
// dashboard without them answers 404, and the page says so instead of failing.

import { call } from '../api.js';
import { announce, button, field, h, heading, notice, show, table, time } from '../ui.js';

const METHODS = ['POST', 'PUT', 'PATCH', 'GET', 'DELETE'];

export async function render(view) {
  const message = h('div', { class: 'messages' });
  const list = h('div', {}, h('p', { class: 'loading' }, 'Loading webhooks\u2026'));
  const deliveries = h('section', { class: 'deliveries', 'aria-labelledby': 'deliveries-title' });
  const refresh = () => load(list, message);
  view.replaceChildren(heading('Webhooks'), message, list, createForm(message, refresh), deliveries);
  await Promise.all([refresh(), deliveryLog(deliveries)]);
}

async function load(list, message) {
  let hooks;
  try {
    hooks = (await call('GET', '/api/hooks', { query: { p: -1 } })).hooks || [];
  } catch (e) {
    show(list, notice('error', `The webhooks could not be listed: ${e.message}`));
    return;
  }
  const rows = hooks.map((hook) => {
    const name = hook.name || hook.webhook_id;
    return [
      name,
      hook.method,
      h('code', { class: 'wrap' }, hook.target_path),
      h('code', {}, hook.webhook_id),
      h('div', { class: 'actions' },
        button('Delete', async () => {
          if (!window.confirm(`Delete the webhook \u201c${name}\u201d?`)) return;
          try {
            await call('DELETE', `/api/hooks/${encodeURIComponent(hook.id)}`);
            show(message, notice('ok', `${name} was deleted.`));
            announce(`${name} was deleted.`);
            await load(list, message);
          } catch (e) {
            show(message, notice('error', e.message));
          }
        }, { class: 'small danger', 'aria-label': `Delete webhook ${name}` })),
    ];
  });
  show(list, table('Webhooks', ['Name', 'Method', 'Target', 'Webhook id', 'Actions'], rows, 'No webhooks yet.'));
}

/** `Name: value` lines as a header map; null when there are none. */
function headerMap(text) {
  const map = {};
  for (const line of text.split('\n')) {
    const at = line.indexOf(':');
    if (at > 0) map[line.slice(0, at).trim()] = line.slice(at + 1).trim();
  }
  return Object.keys(map).length ? map : null;
}

function createForm(message, refresh) {
  const name = h('input', { id: 'hook-name', type: 'text', autocomplete: 'off' });
  const method = h('select', { id: 'hook-method' }, METHODS.map((m) => h('option', { value: m }, m)));
  const target = h('input', { id: 'hook-target', type: 'url', required: true, placeholder: 'https://example.com/hook', autocomplete: 'off' });
  const headers = h('textarea', { id: 'hook-headers', rows: '3', spellcheck: 'false', placeholder: 'X-Token: secret' });
  const form = h('form', { class: 'card' },
    h('h2', {}, 'New webhook'),
    h('div', { class: 'grid' },
      field('Name', name),
      field('Method', method),
      field('Target URL', target, 'An absolute http or https URL.')),
    field('Headers', headers, 'One \u201cName: value\u201d per line; optional.'),
    h('button', { type: 'submit' }, 'Create webhook'));
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    try {
      await call('POST', '/api/hooks', {
        json: { name: name.value.trim(), method: method.value, target_path: target.value.trim(), header_map: headerMap(headers.value) },
      });
      const text = `Webhook ${name.value.trim() || target.value.trim()} was created.`;
      show(message, notice('ok', text));
      announce(text);
      form.reset();
      await refresh();
    } catch (e) {
      show(message, notice('error', `Not created: ${e.message}`));
    }
  });
  return form;
}

/** The delivery log, filtered by status, with Replay on dead deliveries. */
async function deliveryLog(section) {
  const filter = h('select', { id: 'delivery-status' },
    h('option', { value: '' }, 'Any'),
    ['pending', 'delivered', 'dead'].map((s) => h('option', { value: s }, s[0].toUpperCase() + s.slice(1))));
  const message = h('div', { class: 'messages' });
  const list = h('div', {});
  const load = async () => {
    let found;
    try {
      found = await call('GET', '/api/deliveries', { query: { status: filter.value } });
    } catch (e) {
      show(list, e.status === 404
        ? notice('info', 'This dashboard keeps no delivery log (GET /api/deliveries is not available).')
        : notice('error', `The deliveries could not be listed: ${e.message}`));
      return;
    }
    const items = deliveriesOf(found);
    const rows = items.map((d) => [
      time(d.created_at),
      d.event,
      d.source,
      h('code', { class: 'wrap' }, d.url),
      h('span', { class: `badge ${d.status === 'delivered' ? 'ok' : d.status === 'dead' ? 'bad' : 'warn'}` }, d.status),
      String(d.attempts ?? ''),
      d.last_status === null || d.last_status === undefined ? '\u2014' : String(d.last_status),
      d.last_error || '\u2014',
      d.status === 'dead'
        ? button('Replay', async () => {
          try {
            await call('POST', `/api/deliveries/${encodeURIComponent(d.id)}/replay`);
            show(message, notice('ok', `Delivery ${d.id} was queued again.`));
            announce('The delivery was queued again.');
            await load();
          } catch (e) {
            show(message, notice('error', e.message));
          }
        }, { class: 'small', 'aria-label': `Replay delivery ${d.id}` })
        : '',
    ]);
    show(list, table('Webhook deliveries', ['Created', 'Event', 'Source', 'URL', 'Status', 'Attempts', 'Last status', 'Last error', 'Actions'], rows,
      'No deliveries match.'));
  };
  filter.addEventListener('change', load);
  section.replaceChildren(
    h('h2', { id: 'deliveries-title' }, 'Deliveries'),
    h('div', { class: 'toolbar' }, field('Status', filter), button('Refresh', load, { class: 'secondary', 'aria-label': 'Refresh deliveries' })),
    message,
    list);
  await load();
}

/** The deliveries in a list answer: the array itself, its `deliveries`, or its one array. */
function deliveriesOf(body) {
  if (Array.isArray(body)) return body;
  if (body && Array.isArray(body.deliveries)) return body.deliveries;
  const arrays = Object.values(body || {}).filter(Array.isArray);
  return arrays.length === 1 ? arrays[0] : [];
}
