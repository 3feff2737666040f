// The console's shell: sign-in, the section navigation and the hash routes. Each page
// is a module loaded when first shown, so the first screen needs only this file, the
// API client and the helpers. A new page (a stream's live graph, say) is one module and
// one entry in ROUTES.

import { ApiError, call, session } from './api.js';
import { announce, h, heading, notice } from './ui.js';

const main = document.getElementById('main');
const nav = document.getElementById('nav');
const logout = document.getElementById('logout');

/** Hash routes: a pattern, the section it belongs to, its module and what to call. */
const ROUTES = [
  { path: /^\/apis$/, section: 'apis', page: () => import('./pages/apis.js'), show: (m, view) => m.render(view) },
  { path: /^\/apis\/new\/(streams|oas)$/, section: 'apis', page: () => import('./pages/editor.js'), show: (m, view, [kind]) => m.create(view, kind) },
  { path: /^\/apis\/(streams|oas)\/([^/]+)$/, section: 'apis', page: () => import('./pages/editor.js'), show: (m, view, [kind, id]) => m.edit(view, kind, decodeURIComponent(id)) },
  { path: /^\/certs$/, section: 'certs', page: () => import('./pages/certs.js'), show: (m, view) => m.render(view) },
  { path: /^\/hooks$/, section: 'hooks', page: () => import('./pages/hooks.js'), show: (m, view) => m.render(view) },
  { path: /^\/keys$/, section: 'keys', page: () => import('./pages/keys.js'), show: (m, view) => m.render(view) },
  { path: /^\/live\/([^/]+)$/, section: 'apis', page: () => import('./pages/live.js'), show: (m, view, [id]) => m.render(view, decodeURIComponent(id)) },
  { path: /^\/mapping$/, section: 'mapping', page: () => import('./pages/mapping.js'), show: (m, view) => m.render(view) },
  { path: /^\/portal$/, section: 'portal', page: () => import('./pages/portal.js'), show: (m, view) => m.render(view) },
];
const HOME = '#/apis';

let shown = 0;

/** Shows the page the hash names (or sign-in, without a session). */
async function route() {
  shown += 1;
  const mine = shown;
  const view = h('div', { class: 'view' });
  main.replaceChildren(view);
  const signedIn = session.active;
  nav.hidden = !signedIn;
  logout.hidden = !signedIn;
  if (!signedIn) {
    signIn(view);
    return;
  }
  const hash = window.location.hash.replace(/^#/, '');
  const found = ROUTES.map((r) => [r, hash.match(r.path)]).find(([, m]) => m);
  if (!found) {
    window.location.replace(HOME);
    return;
  }
  const [entry, match] = found;
  for (const link of nav.querySelectorAll('a')) {
    if (link.dataset.section === entry.section) link.setAttribute('aria-current', 'page');
    else link.removeAttribute('aria-current');
  }
  try {
    const module = await entry.page();
    if (mine !== shown) return;
    await entry.show(module, view, match.slice(1));
  } catch (e) {
    // A page that failed to load or render says so where it would have been.
    if (mine === shown) view.replaceChildren(heading('Something went wrong'), notice('error', e.message));
  }
  if (mine === shown) {
    const title = view.querySelector('h1');
    if (title) {
      document.title = `${title.textContent} · Sluice console`;
      title.focus({ preventScroll: true });
    }
  }
}

/** The sign-in form: a key, checked against the API before the session starts. */
function signIn(view, reason) {
  document.title = 'Sign in · Sluice console';
  const input = h('input', { id: 'key', type: 'password', name: 'key', required: true, autocomplete: 'off', spellcheck: 'false', 'aria-describedby': 'key-hint' });
  const message = h('div', { id: 'signin-message' });
  const form = h('form', { class: 'card signin', novalidate: true },
    heading('Sign in'),
    h('div', { class: 'field' },
      h('label', { for: 'key' }, 'Dashboard API key'),
      input,
      h('small', { id: 'key-hint', class: 'hint' }, 'The key is kept in this tab\u2019s memory only: reloading or closing the page signs you out.')),
    h('button', { type: 'submit' }, 'Sign in'),
    message);
  if (reason) message.replaceChildren(notice('error', reason));
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    const key = input.value.trim();
    if (!key) {
      message.replaceChildren(notice('error', 'Enter a key.'));
      input.focus();
      return;
    }
    try {
      // Any authenticated read proves the key; every user may list keys.
      await call('GET', '/api/keys', { as: key });
    } catch (e) {
      const text = e instanceof ApiError && e.status === 401
        ? 'That key was refused. Check it and try again.'
        : e.message;
      message.replaceChildren(notice('error', text));
      input.select();
      input.focus();
      return;
    }
    session.start(key);
    announce('Signed in.');
    if (!ROUTES.some((r) => r.path.test(window.location.hash.replace(/^#/, '')))) {
      window.location.hash = HOME;
    }
    route();
  });
  view.replaceChildren(form);
  input.focus();
}

session.onRefused(() => {
  session.end();
  const view = h('div', { class: 'view' });
  main.replaceChildren(view);
  nav.hidden = true;
  logout.hidden = true;
  shown += 1;
  signIn(view, 'The dashboard no longer accepts this key (it may have been revoked). Sign in again.');
});

logout.addEventListener('click', () => {
  session.end();
  announce('Signed out.');
  route();
});

document.getElementById('skip').addEventListener('click', (event) => {
  // The hash holds the route, so the skip link moves focus instead of navigating.
  event.preventDefault();
  main.focus();
});

window.addEventListener('hashchange', route);
route();
