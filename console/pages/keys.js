// Keys: the dashboard's own API keys (the organisation's for an admin, one's own for a
// member): create one, shown once, and revoke.

import { call } from '../api.js';
import { announce, button, field, h, heading, notice, show, table, time } from '../ui.js';

export async function render(view) {
  const message = h('div', { class: 'messages' });
  const fresh = h('div', { id: 'new-key-region' });
  const list = h('div', {}, h('p', { class: 'loading' }, 'Loading keys\u2026'));
  let users = [];
  try {
    users = (await call('GET', '/api/users', { query: { p: -1 } })).users || [];
  } catch {
    // Without the user list, names fall back to ids and new keys are one's own.
  }
  const names = new Map(users.map((u) => [u.id, u.name]));
  const refresh = () => load(list, message, names, fresh);
  view.replaceChildren(
    heading('Keys'),
    h('p', {}, 'Dashboard API keys. Admins see and manage every key of the organisation; members their own. The store keeps only a hash: a key is shown once, when it is created.'),
    message,
    fresh,
    list,
    createForm(users, message, fresh, refresh),
    await gatewayKeys());
  await refresh();
}

/** The gateway's keys: what callers of the APIs use, with access rights, rate and quota. */
async function gatewayKeys() {
  const message = h('div', { class: 'messages' });
  const fresh = h('div', {});
  const list = h('div', {});
  let apis = [];
  try {
    const [streams, plain] = await Promise.all([
      call('GET', '/api/apis/streams', { query: { p: -1 } }),
      call('GET', '/api/apis/oas', { query: { p: -1 } }),
    ]);
    apis = [...streams.apis, ...plain.apis];
  } catch {
    // Without the list a key cannot be given rights; the section says so below.
  }
  const load = async () => {
    try {
      const keys = (await call('GET', '/api/gateway/keys')).keys || [];
      const rows = keys.map((k) => [
        h('code', {}, k.key_id),
        Object.keys(k.access_rights || {}).join(', ') || '\u2013',
        k.rate_limit ? `${k.rate_limit.rate} per ${k.rate_limit.per}` : '\u2013',
        k.quota ? `${k.quota.max} per ${k.quota.renewal}` : '\u2013',
        h('div', { class: 'actions' },
          button('Revoke', async () => {
            if (!window.confirm(`Revoke the gateway key ${k.key_id}? Gateways refuse it within a second.`)) return;
            try {
              await call('DELETE', `/api/gateway/keys/${encodeURIComponent(k.key_id)}`);
              show(message, notice('ok', `Gateway key ${k.key_id} was revoked.`));
              show(fresh, null);
              await load();
            } catch (e) {
              show(message, notice('error', e.message));
            }
          }, { class: 'small danger', 'aria-label': `Revoke gateway key ${k.key_id}` })),
      ]);
      show(list, table('Gateway keys', ['Key id', 'APIs', 'Rate limit', 'Quota', 'Actions'], rows, 'No gateway keys.'));
    } catch (e) {
      show(list, notice('error', `The gateway keys could not be listed: ${e.message}`));
    }
  };
  const api = h('select', { id: 'gw-key-api', multiple: true, size: Math.min(5, Math.max(2, apis.length)) },
    apis.map((a) => h('option', { value: a.id }, a.name || a.id)));
  const rate = h('input', { id: 'gw-key-rate', type: 'number', min: '1', inputmode: 'numeric' });
  const per = h('input', { id: 'gw-key-per', type: 'number', min: '1', value: '1', inputmode: 'numeric' });
  const quota = h('input', { id: 'gw-key-quota', type: 'number', min: '1', inputmode: 'numeric' });
  const renewal = h('input', { id: 'gw-key-renewal', type: 'text', value: '1h', spellcheck: 'false' });
  const form = h('form', { class: 'card' },
    h('h3', {}, 'New gateway key'),
    field('APIs it opens', api, 'Select one or more; the key reaches only these.'),
    field('Rate limit (requests)', rate, 'Empty for none.'),
    field('Per (seconds)', per),
    field('Quota (requests)', quota, 'Empty for none.'),
    field('Quota renews every', renewal, 'A duration such as 1h or 30m.'),
    h('button', { type: 'submit' }, 'Create gateway key'));
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    const body = { access_rights: Object.fromEntries([...api.selectedOptions].map((o) => [o.value, {}])) };
    if (rate.value) body.rate_limit = { rate: Number(rate.value), per: Number(per.value || 1) };
    if (quota.value) body.quota = { max: Number(quota.value), renewal: renewal.value };
    try {
      const made = await call('POST', '/api/gateway/keys', { json: body });
      show(fresh, h('div', { class: 'card new-key', role: 'status' },
        h('p', {}, h('strong', {}, `New gateway key ${made.key_id}`), ': copy it now, it is not shown again.'),
        h('p', { class: 'key-line' }, h('code', { id: 'new-gateway-key', class: 'secret' }, made.key || '(basic auth)'))));
      show(message, null);
      await load();
    } catch (e) {
      show(message, notice('error', `Not created: ${e.message}`));
    }
  });
  await load();
  return h('section', { 'aria-labelledby': 'gateway-keys-title' },
    h('h2', { id: 'gateway-keys-title' }, 'Gateway keys'),
    h('p', {}, 'Keys that callers present to the gateway: each opens the APIs it lists, within its rate limit and quota. The store keeps only a hash.'),
    message, fresh, list, form);
}

async function load(list, message, names, fresh) {
  let keys;
  try {
    keys = (await call('GET', '/api/keys', { query: { p: -1 } })).keys || [];
  } catch (e) {
    show(list, notice('error', `The keys could not be listed: ${e.message}`));
    return;
  }
  const rows = keys.map((k) => [
    h('code', {}, k.id),
    names.get(k.user_id) || h('code', {}, k.user_id),
    time(k.created_at),
    h('div', { class: 'actions' },
      button('Revoke', async () => {
        if (!window.confirm(`Revoke the key ${k.id}? Anything using it is refused at once.`)) return;
        try {
          await call('DELETE', `/api/keys/${encodeURIComponent(k.id)}`);
          show(message, notice('ok', `Key ${k.id} was revoked.`));
          // A revoked key shown a moment ago is of no use any more.
          if (fresh.dataset.keyId === k.id) show(fresh, null);
          announce('The key was revoked.');
          await load(list, message, names, fresh);
        } catch (e) {
          show(message, notice('error', e.message));
        }
      }, { class: 'small danger', 'aria-label': `Revoke key ${k.id}` })),
  ]);
  show(list, table('Dashboard keys', ['Key id', 'User', 'Created', 'Actions'], rows, 'No keys.'));
}

function createForm(users, message, fresh, refresh) {
  const user = h('select', { id: 'key-user' },
    h('option', { value: '' }, 'Myself'),
    users.map((u) => h('option', { value: u.id }, `${u.name} (${u.role})`)));
  const form = h('form', { class: 'card' },
    h('h2', {}, 'New key'),
    field('For user', user, 'Only admins may create keys for other users.'),
    h('button', { type: 'submit' }, 'Create key'));
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    try {
      const made = await call('POST', '/api/keys', { json: user.value ? { user_id: user.value } : {} });
      const code = h('code', { id: 'new-key', class: 'secret' }, made.key);
      const copy = button('Copy', async () => {
        try {
          await navigator.clipboard.writeText(made.key);
          announce('Copied.');
        } catch {
          announce('Copying is not allowed here: select the key and copy it.');
        }
      }, { class: 'small secondary', 'aria-label': 'Copy the new key' });
      fresh.dataset.keyId = made.key_id;
      show(fresh, h('div', { class: 'card new-key', role: 'status' },
        h('p', {}, h('strong', {}, `New key ${made.key_id}`), ': copy it now, it is not shown again.'),
        h('p', { class: 'key-line' }, code, ' ', copy)));
      show(message, null);
      await refresh();
    } catch (e) {
      show(message, notice('error', `Not created: ${e.message}`));
    }
  });
  return form;
}
