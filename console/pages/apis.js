// APIs: the organisation's plain and streaming APIs with their state, listen path and
// live request rate (read every two seconds); activate, deactivate and delete here,
// create and edit in the editor.

import { call } from '../api.js';
import { announce, button, h, heading, notice, show, table, time } from '../ui.js';

/** The media type each collection takes. */
export const MEDIA = { streams: 'application/vnd.sluice.streams.oas', oas: 'application/json' };

export async function render(view) {
  const message = h('div', { class: 'messages' });
  const list = h('div', {}, h('p', { class: 'loading' }, 'Loading APIs\u2026'));
  view.replaceChildren(
    heading('APIs'),
    h('div', { class: 'toolbar' },
      h('a', { class: 'button', href: '#/apis/new/streams' }, 'New streaming API'),
      h('a', { class: 'button secondary', href: '#/apis/new/oas' }, 'New plain API')),
    message,
    list);
  await refresh(list, message);
  watchRates(list);
}

const RATE_PERIOD_MS = 2000;

/** Fills each row's rate cell from two readings of `GET /api/apis/requests`. */
function watchRates(list) {
  let last = null;
  const read = async () => {
    if (!list.isConnected) return false;
    let now;
    try {
      now = await call('GET', '/api/apis/requests');
    } catch {
      return true; // The rates stay as they were; the list itself still works.
    }
    for (const cell of list.querySelectorAll('[data-rate-of]')) {
      const id = cell.dataset.rateOf;
      const count = now.apis.find((a) => a.api_id === id);
      const before = last && last.apis.find((a) => a.api_id === id);
      if (!now.running_here) {
        cell.textContent = 'n/a';
        cell.title = 'No gateway runs in the dashboard\u2019s process';
      } else if (count && before && now.at > last.at) {
        const rate = Math.max(0, (count.requests - before.requests) / ((now.at - last.at) / 1000));
        cell.textContent = rate >= 100 ? Math.round(rate).toLocaleString('en') : rate.toFixed(1);
      }
    }
    last = now;
    return true;
  };
  read();
  const timer = setInterval(async () => {
    if (!(await read())) clearInterval(timer);
  }, RATE_PERIOD_MS);
}

async function refresh(list, message) {
  let apis;
  try {
    const [streams, plain] = await Promise.all([
      call('GET', '/api/apis/streams', { query: { p: -1 } }),
      call('GET', '/api/apis/oas', { query: { p: -1 } }),
    ]);
    apis = [
      ...streams.apis.map((a) => ({ ...a, kind: 'streams' })),
      ...plain.apis.map((a) => ({ ...a, kind: 'oas' })),
    ];
  } catch (e) {
    show(list, notice('error', `The APIs could not be listed: ${e.message}`));
    return;
  }
  apis.sort((a, b) => a.name.localeCompare(b.name));
  const done = (text) => {
    show(message, notice('ok', text));
    announce(text);
    return refresh(list, message);
  };
  const failed = (e) => show(message, notice('error', e.message));
  const rows = apis.map((api) => {
    const name = api.name || api.id;
    const editHref = `#/apis/${api.kind}/${encodeURIComponent(api.id)}`;
    return [
      h('a', { href: editHref }, name),
      api.kind === 'streams' ? 'Streaming' : 'Plain',
      h('code', {}, api.listen_path),
      h('span', { class: `badge ${api.active ? 'ok' : 'off'}` }, api.active ? 'Active' : 'Inactive'),
      h('span', { class: 'rate', 'data-rate-of': api.id }, '\u2013'),
      time(api.updated_at),
      h('div', { class: 'actions' },
        h('a', { class: 'button small secondary', href: editHref, 'aria-label': `Edit ${name}` }, 'Edit'),
        api.kind === 'streams'
          ? h('a', { class: 'button small secondary', href: `#/live/${encodeURIComponent(api.id)}`, 'aria-label': `Live view of ${name}` }, 'Live')
          : null,
        button(api.active ? 'Deactivate' : 'Activate', async () => {
          try {
            await setActive(api, !api.active);
            await done(`${name} is now ${api.active ? 'inactive' : 'active'}.`);
          } catch (e) {
            failed(e);
          }
        }, { class: 'small secondary', 'aria-label': `${api.active ? 'Deactivate' : 'Activate'} ${name}` }),
        button('Delete', async () => {
          if (!window.confirm(`Delete the API \u201c${name}\u201d? Gateways stop serving it.`)) return;
          try {
            await call('DELETE', `/api/apis/${api.kind}/${encodeURIComponent(api.id)}`);
            await done(`${name} was deleted.`);
          } catch (e) {
            failed(e);
          }
        }, { class: 'small danger', 'aria-label': `Delete ${name}` })),
    ];
  });
  show(list, table('Plain and streaming APIs', ['Name', 'Kind', 'Listen path', 'State', 'Requests/s', 'Updated', 'Actions'], rows,
    'No APIs yet: create one with the buttons above.'));
}

/** Sets `x-sluice-api-gateway.info.state.active` through the API's own read and replace. */
async function setActive(api, active) {
  const path = `/api/apis/${api.kind}/${encodeURIComponent(api.id)}`;
  const doc = await call('GET', path);
  const ext = doc['x-sluice-api-gateway'] || (doc['x-sluice-api-gateway'] = {});
  const info = ext.info || (ext.info = {});
  info.state = { ...(info.state || {}), active };
  await call('PUT', path, { text: JSON.stringify(doc), type: MEDIA[api.kind] });
}
