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
    createForm(users, message, fresh, refresh));
  await refresh();
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
