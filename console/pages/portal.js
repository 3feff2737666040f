// The developer portal, from the publisher's side: products (what they offer, whether
// they are published, how keys are issued), the apps developers asked for with their
// approval, who may sign up, and invitations.

import { call } from '../api.js';
import { announce, button, field, h, heading, notice, show, table, time } from '../ui.js';

export async function render(view) {
  const message = h('div', { class: 'messages' });
  const fresh = h('div', {});
  const products = h('div', {}, h('p', { class: 'loading' }, 'Loading products\u2026'));
  const apps = h('div', {});
  const settings = h('div', {});
  let apis = [];
  try {
    const [streams, plain] = await Promise.all([
      call('GET', '/api/apis/streams', { query: { p: -1 } }),
      call('GET', '/api/apis/oas', { query: { p: -1 } }),
    ]);
    apis = [...streams.apis, ...plain.apis];
  } catch {
    // Without the list a product cannot be given APIs; the form says so.
  }
  const refresh = async () => {
    await Promise.all([
      loadProducts(products, message),
      loadApps(apps, message),
    ]);
  };
  view.replaceChildren(
    heading('Portal'),
    h('p', {}, 'What the developer portal (', h('a', { href: '/portal/' }, '/portal/'), ') publishes, and the apps its developers made.'),
    message,
    fresh,
    products,
    productForm(apis, message, fresh, refresh),
    apps,
    settings);
  await Promise.all([refresh(), loadSettings(settings, message, fresh)]);
}

/** The product as `PUT` takes it, with `changes` applied (its publish secret is kept). */
function input(product, changes) {
  return {
    name: product.name,
    description: product.description,
    api_ids: product.api_ids,
    webhooks: product.webhooks,
    published: product.published,
    key_approval: product.key_approval,
    ...changes,
  };
}

async function loadProducts(region, message) {
  let products;
  try {
    products = (await call('GET', '/api/portal/products', { query: { p: -1 } })).products;
  } catch (e) {
    show(region, notice('error', `The products could not be listed: ${e.message}`));
    return;
  }
  const rows = products.map((p) => [
    p.name,
    p.api_ids.join(', ') || '\u2013',
    p.webhooks.enabled ? p.webhooks.events.join(', ') : '\u2013',
    p.key_approval === 'manual' ? 'on approval' : 'at once',
    h('span', { class: `badge ${p.published ? 'ok' : 'off'}` }, p.published ? 'published' : 'draft'),
    h('div', { class: 'actions' },
      button(p.published ? 'Unpublish' : 'Publish', async () => {
        try {
          await call('PUT', `/api/portal/products/${encodeURIComponent(p.id)}`, { json: input(p, { published: !p.published }) });
          const said = `${p.name} is ${p.published ? 'no longer published' : 'published'}.`;
          show(message, notice('ok', said));
          announce(said);
          await loadProducts(region, message);
        } catch (e) {
          show(message, notice('error', e.message));
        }
      }, { class: 'small', 'aria-label': `${p.published ? 'Unpublish' : 'Publish'} ${p.name}` }),
      button('Delete', async () => {
        if (!window.confirm(`Delete the product \u201c${p.name}\u201d with its apps? Their keys are revoked.`)) return;
        try {
          await call('DELETE', `/api/portal/products/${encodeURIComponent(p.id)}`);
          show(message, notice('ok', `${p.name} was deleted.`));
          await loadProducts(region, message);
        } catch (e) {
          show(message, notice('error', e.message));
        }
      }, { class: 'small danger', 'aria-label': `Delete ${p.name}` })),
  ]);
  show(region, table('Products', ['Product', 'APIs', 'Webhook events', 'Keys', 'Portal', 'Actions'], rows, 'No products yet.'));
}

function productForm(apis, message, fresh, refresh) {
  const name = h('input', { id: 'product-name', type: 'text', required: true, maxlength: '200' });
  const description = h('textarea', { id: 'product-description', rows: '3', maxlength: '4000' });
  const api = h('select', { id: 'product-apis', multiple: true, size: Math.min(6, Math.max(2, apis.length)) },
    apis.map((a) => h('option', { value: a.id }, a.name || a.id)));
  const events = h('input', { id: 'product-events', type: 'text', spellcheck: 'false', placeholder: 'order.created, order.paid' });
  const approval = h('select', { id: 'product-approval' },
    h('option', { value: 'auto' }, 'At once'),
    h('option', { value: 'manual' }, 'After I approve'));
  const published = h('input', { id: 'product-published', type: 'checkbox' });
  const form = h('form', { class: 'card' },
    h('h2', {}, 'New product'),
    field('Name', name),
    field('Description', description),
    field('APIs', api, apis.length ? 'Select the APIs it offers.' : 'No APIs yet: make one first.'),
    field('Webhook events', events, 'Comma-separated names developers may subscribe to; empty for none.'),
    field('Keys are issued', approval),
    h('div', { class: 'field' }, h('label', {}, published, ' Publish it in the portal now')),
    h('button', { type: 'submit' }, 'Create the product'));
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    const names = events.value.split(',').map((e) => e.trim()).filter(Boolean);
    try {
      const made = await call('POST', '/api/portal/products', {
        json: {
          name: name.value,
          description: description.value,
          api_ids: [...api.selectedOptions].map((o) => o.value),
          webhooks: { enabled: names.length > 0, events: names },
          key_approval: approval.value,
          published: published.checked,
        },
      });
      show(fresh, h('div', { class: 'card new-key', role: 'status' },
        h('h3', {}, `${name.value}: publish secret`),
        h('p', {}, 'Streams sign the events they publish to this product with it (the secret of a portal_webhook output).'),
        h('p', {}, h('code', { class: 'secret' }, made.publish_secret))));
      show(message, null);
      form.reset();
      await refresh();
    } catch (e) {
      show(message, notice('error', e.message));
    }
  });
  return form;
}

async function loadApps(region, message) {
  let apps;
  try {
    apps = (await call('GET', '/api/portal/apps', { query: { p: -1 } })).apps;
  } catch (e) {
    show(region, notice('error', `The apps could not be listed: ${e.message}`));
    return;
  }
  const decide = (app, verb) => button(verb === 'approve' ? 'Approve' : 'Refuse', async () => {
    try {
      await call('POST', `/api/portal/apps/${encodeURIComponent(app.id)}/${verb}`);
      show(message, notice('ok', `${app.name} was ${verb === 'approve' ? 'approved' : 'refused'}.`));
      await loadApps(region, message);
    } catch (e) {
      show(message, notice('error', e.message));
    }
  }, { class: `small ${verb === 'approve' ? '' : 'danger'}`, 'aria-label': `${verb === 'approve' ? 'Approve' : 'Refuse'} ${app.name}` });
  const rows = apps.map((a) => [
    a.name,
    a.developer || '\u2013',
    h('span', { class: `badge ${a.status === 'approved' ? 'ok' : a.status === 'pending' ? 'warn' : 'bad'}` }, a.status),
    a.key_id ? h('code', {}, a.key_id) : '\u2013',
    time(a.created_at),
    h('div', { class: 'actions' },
      a.status !== 'approved' ? decide(a, 'approve') : null,
      a.status !== 'rejected' ? decide(a, 'reject') : null),
  ]);
  show(region, table('Apps', ['App', 'Developer', 'Access', 'Key', 'Made', 'Actions'], rows, 'No apps yet.'));
}

async function loadSettings(region, message, fresh) {
  let settings;
  try {
    settings = await call('GET', '/api/portal/settings');
  } catch (e) {
    show(region, notice('error', `The portal's settings could not be read: ${e.message}`));
    return;
  }
  const signup = h('select', { id: 'portal-signup' },
    [['off', 'Nobody'], ['invite', 'By invitation'], ['open', 'Anyone']].map(([v, t]) => h('option', { value: v, selected: settings.signup === v }, t)));
  const hook = h('input', { id: 'portal-reset-hook', type: 'text', spellcheck: 'false', value: settings.reset_webhook || '' });
  const form = h('form', { class: 'card' },
    h('h2', {}, 'Sign-up'),
    field('Who may sign up', signup),
    field('Reset webhook', hook, 'A webhook of yours that receives password-reset tokens (event portal.password_reset); empty: they go to the dashboard\u2019s log.'),
    h('button', { type: 'submit' }, 'Save'));
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    try {
      await call('PUT', '/api/portal/settings', { json: { signup: signup.value, reset_webhook: hook.value.trim() || null } });
      show(message, notice('ok', 'The portal\u2019s settings are saved.'));
    } catch (e) {
      show(message, notice('error', e.message));
    }
  });
  const email = h('input', { id: 'invite-email', type: 'email', required: true });
  const invite = h('form', { class: 'card' },
    h('h2', {}, 'Invite a developer'),
    field('E-mail address', email),
    h('button', { type: 'submit' }, 'Make an invitation'));
  invite.addEventListener('submit', async (event) => {
    event.preventDefault();
    try {
      const made = await call('POST', '/api/portal/invitations', { json: { email: email.value } });
      show(fresh, h('div', { class: 'card new-key', role: 'status' },
        h('h3', {}, `Invitation for ${made.email}`),
        h('p', {}, 'Hand it to the developer: they sign up with it. It is shown this once.'),
        h('p', {}, h('code', { class: 'secret' }, made.invitation))));
      invite.reset();
    } catch (e) {
      show(message, notice('error', e.message));
    }
  });
  region.replaceChildren(form, invite);
}
