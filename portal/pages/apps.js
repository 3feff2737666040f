// A developer's apps: make one for a product, get (rotate, revoke) its key, subscribe
// URLs to the product's events, send a test event, read the deliveries and send dead
// ones again. Keys and secrets are shown once, when made.

import { call, catalogue as products } from '../api.js';
import { announce, button, field, h, heading, notice, show, table, time } from '/console/ui.js';

const STATUS = { approved: 'ok', pending: 'warn', rejected: 'bad' };

function badge(status) {
  return h('span', { class: `badge ${STATUS[status] || 'off'}` }, status);
}

/** A secret shown once, in a card that says so. */
function once(title, label, value) {
  return h('div', { class: 'card new-key', role: 'status' },
    h('h3', {}, title),
    h('p', {}, `${label} It is shown this once: copy it now.`),
    h('p', {}, h('code', { class: 'secret', 'data-secret': 'true' }, value)));
}

export async function list(view) {
  const message = h('div', { class: 'messages' });
  const fresh = h('div', {});
  const region = h('div', {}, h('p', { class: 'loading' }, 'Loading your apps\u2026'));
  const catalogue = await products();
  const load = async () => {
    const { apps } = await call('GET', '/apps');
    show(region, table('Your apps', ['App', 'Product', 'Access', 'Key'], apps.map((a) => [
      h('a', { href: `#/apps/${encodeURIComponent(a.id)}` }, a.name),
      a.product_name,
      badge(a.status),
      a.key_id ? h('code', {}, a.key_id) : '\u2013',
    ]), 'No apps yet: make one below.'));
  };
  const name = h('input', { id: 'app-name', type: 'text', required: true, maxlength: '200' });
  const product = h('select', { id: 'app-product', required: true },
    catalogue.map((p) => h('option', { value: p.id }, p.name)));
  const form = h('form', { class: 'card' },
    h('h2', {}, 'New app'),
    field('Name', name),
    field('Product', product, 'The app asks for access to the product\u2019s APIs.'),
    h('button', { type: 'submit' }, 'Make the app'));
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    try {
      const made = await call('POST', '/apps', { name: name.value, product_id: product.value });
      if (made.key) {
        show(fresh, once(`${made.app.name}: your key`, 'Send it as the Authorization header of your calls.', made.key));
        announce('App made; its key is shown once.');
      } else {
        show(fresh, notice('ok', `${made.app.name} is waiting for the publisher\u2019s approval; its key comes after.`));
      }
      show(message, null);
      form.reset();
      await load();
    } catch (e) {
      show(message, notice('error', e.message));
    }
  });
  view.replaceChildren(heading('My apps'), message, fresh, region, form);
  await load();
}

export async function detail(view, id) {
  const message = h('div', { class: 'messages' });
  const fresh = h('div', {});
  const body = h('div', {});
  const render = async () => {
    const app = await call('GET', `/apps/${encodeURIComponent(id)}`);
    const keyActions = app.status === 'approved'
      ? h('div', { class: 'actions' },
        button(app.key_id ? 'Rotate the key' : 'Get a key', async () => {
          try {
            const key = await call('POST', `/apps/${encodeURIComponent(id)}/key`, {});
            show(fresh, once('Your new key', app.key_id ? 'The old key no longer works.' : 'Send it as the Authorization header of your calls.', key.key));
            announce('New key shown once.');
            await render();
          } catch (e) { show(message, notice('error', e.message)); }
        }),
        app.key_id ? button('Revoke the key', async () => {
          if (!window.confirm('Revoke the key? Calls with it are refused from now on.')) return;
          try {
            await call('DELETE', `/apps/${encodeURIComponent(id)}/key`);
            show(fresh, notice('ok', 'The key is revoked.'));
            await render();
          } catch (e) { show(message, notice('error', e.message)); }
        }, { class: 'danger' }) : null)
      : notice('info', app.status === 'pending' ? 'The publisher has not approved this app yet.' : 'The publisher refused this app access.');
    body.replaceChildren(
      h('section', { class: 'card' },
        h('h2', {}, 'Access'),
        h('p', {}, 'Product: ', app.product_name, ' ', badge(app.status)),
        h('p', {}, 'Key: ', app.key_id ? h('code', {}, app.key_id) : 'none'),
        keyActions),
      await subscriptions(app, message, fresh, render),
      await deliveries(app, message));
  };
  view.replaceChildren(heading('App'), h('p', {}, h('a', { href: '#/apps' }, 'All my apps')), message, fresh, body);
  try {
    await render();
    const app = await call('GET', `/apps/${encodeURIComponent(id)}`);
    view.querySelector('h1').textContent = app.name;
  } catch (e) {
    show(body, notice('error', e.message));
  }
}

async function subscriptions(app, message, fresh, render) {
  const id = encodeURIComponent(app.id);
  const rows = app.webhooks.map((s) => [
    h('code', {}, s.url),
    s.events.join(', '),
    h('div', { class: 'actions' },
      button('Send a test event', async () => {
        try {
          await call('POST', `/apps/${id}/subscriptions/${encodeURIComponent(s.id)}/test`, {});
          show(message, notice('ok', 'A test event is on its way; see the deliveries below.'));
          await render();
        } catch (e) { show(message, notice('error', e.message)); }
      }, { class: 'small secondary' }),
      button('Unsubscribe', async () => {
        try {
          await call('DELETE', `/apps/${id}/subscriptions/${encodeURIComponent(s.id)}`);
          await render();
        } catch (e) { show(message, notice('error', e.message)); }
      }, { class: 'small danger' })),
  ]);
  const section = h('section', { class: 'card' }, h('h2', {}, 'Webhook subscriptions'));
  if (!app.events.length) {
    section.append(notice('info', 'This product opens no events to subscription.'));
    return section;
  }
  section.append(table('Subscriptions', ['URL', 'Events', 'Actions'], rows, 'No subscriptions.'));
  if (app.status !== 'approved') return section;
  const url = h('input', { id: 'sub-url', type: 'url', required: true, placeholder: 'https://example.com/hooks' });
  const secret = h('input', { id: 'sub-secret', type: 'text', spellcheck: 'false', autocomplete: 'off' });
  const events = h('fieldset', {}, h('legend', {}, 'Events'),
    app.events.map((e) => h('label', { class: 'check' }, h('input', { type: 'checkbox', name: 'events', value: e }), ' ', e)));
  const form = h('form', {},
    h('h3', {}, 'Subscribe'),
    field('URL', url, 'Where the events are POSTed, signed with the secret (header Sluice-Signature).'),
    field('Secret', secret, '16 to 256 characters; leave it empty to have one made.'),
    events,
    h('button', { type: 'submit' }, 'Subscribe'));
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    const chosen = [...form.querySelectorAll('input[name=events]:checked')].map((c) => c.value);
    try {
      const made = await call('POST', `/apps/${id}/subscriptions`, {
        url: url.value.trim(), events: chosen, ...(secret.value ? { secret: secret.value } : {}),
      });
      show(fresh, once('Subscription secret', 'Check each delivery\u2019s Sluice-Signature with it.', made.secret));
      await render();
    } catch (e) { show(message, notice('error', e.message)); }
  });
  section.append(form);
  return section;
}

async function deliveries(app, message) {
  const section = h('section', { class: 'card' }, h('h2', {}, 'Deliveries'));
  const { deliveries: log } = await call('GET', `/apps/${encodeURIComponent(app.id)}/deliveries`);
  const rows = log.map(({ delivery: d, attempts }) => {
    const last = attempts[attempts.length - 1];
    return [
      time(d.created_at),
      h('code', {}, d.event),
      h('span', { class: `badge ${d.status === 'delivered' ? 'ok' : d.status === 'dead' ? 'bad' : 'warn'}` }, d.status),
      String(d.attempts),
      last ? `${last.status ?? last.error ?? ''}${last.status || last.error ? ', ' : ''}${last.latency_ms} ms` : '\u2013',
      d.status === 'dead' ? button('Redeliver', async () => {
        try {
          await call('POST', `/apps/${encodeURIComponent(app.id)}/deliveries/${encodeURIComponent(d.id)}/redeliver`, {});
          show(message, notice('ok', 'Queued again.'));
        } catch (e) { show(message, notice('error', e.message)); }
      }, { class: 'small secondary' }) : '',
    ];
  });
  section.append(
    table('Deliveries to this app\u2019s subscriptions, newest first', ['When', 'Event', 'Status', 'Attempts', 'Last answer', ''], rows, 'Nothing delivered yet.'),
    button('Refresh', async () => {
      const fresh = await deliveries(app, message);
      section.replaceWith(fresh);
    }, { class: 'small secondary' }));
  return section;
}
