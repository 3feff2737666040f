// The developer portal's shell: who is signed in, the navigation and the hash routes.
// Pages are modules loaded when first shown. Everything goes through ./api.js, which
// keeps the CSRF token; the session itself is an HttpOnly cookie this code never reads.

import { ApiError, portal, session } from './api.js';
import { announce, h, heading, notice } from '/console/ui.js';

const main = document.getElementById('main');
const nav = document.getElementById('nav');
const who = document.getElementById('who');
const signout = document.getElementById('signout');

/** What every page may ask: who is signed in, and a way to refresh that. */
export const state = {
  developer: null,
  signup: 'off',
  async refresh() {
    const s = await session();
    state.developer = s.developer;
    state.signup = s.signup;
    who.hidden = !s.developer;
    who.textContent = s.developer ? s.developer.email : '';
    signout.hidden = !s.developer;
    document.getElementById('nav-apps').hidden = !s.developer;
    document.getElementById('nav-signin').hidden = Boolean(s.developer);
    document.getElementById('nav-signup').hidden = Boolean(s.developer) || s.signup === 'off';
  },
};

const ROUTES = [
  { path: /^\/?$/, section: 'catalogue', page: () => import('./pages/catalogue.js'), show: (m, view) => m.render(view) },
  { path: /^\/products\/([^/]+)$/, section: 'catalogue', page: () => import('./pages/product.js'), show: (m, view, [id]) => m.render(view, decodeURIComponent(id)) },
  { path: /^\/signin$/, section: 'signin', page: () => import('./pages/account.js'), show: (m, view) => m.signIn(view) },
  { path: /^\/signup$/, section: 'signup', page: () => import('./pages/account.js'), show: (m, view) => m.signUp(view) },
  { path: /^\/reset$/, section: 'signin', page: () => import('./pages/account.js'), show: (m, view) => m.reset(view) },
  { path: /^\/apps$/, section: 'apps', page: () => import('./pages/apps.js'), show: (m, view) => m.list(view), signedIn: true },
  { path: /^\/apps\/([^/]+)$/, section: 'apps', page: () => import('./pages/apps.js'), show: (m, view, [id]) => m.detail(view, decodeURIComponent(id)), signedIn: true },
];

let shown = 0;

async function route() {
  shown += 1;
  const mine = shown;
  const view = h('div', { class: 'view' });
  main.replaceChildren(view);
  const hash = window.location.hash.replace(/^#/, '');
  const found = ROUTES.map((r) => [r, hash.match(r.path)]).find(([, m]) => m);
  if (!found) {
    window.location.replace('#/');
    return;
  }
  const [entry, match] = found;
  if (entry.signedIn && !state.developer) {
    window.location.replace('#/signin');
    return;
  }
  for (const link of nav.querySelectorAll('a')) {
    if (link.dataset.section === entry.section) link.setAttribute('aria-current', 'page');
    else link.removeAttribute('aria-current');
  }
  try {
    const module = await entry.page();
    if (mine !== shown) return;
    await entry.show(module, view, match.slice(1));
  } catch (e) {
    if (mine === shown) view.replaceChildren(heading('Something went wrong'), notice('error', e.message));
  }
  if (mine === shown) {
    const title = view.querySelector('h1');
    if (title) {
      document.title = `${title.textContent} · Developer portal`;
      title.focus({ preventScroll: true });
    }
  }
}

/** Shows the page the hash names again (after signing in or out). */
export function reroute() {
  route();
}

signout.addEventListener('click', async () => {
  try {
    const { call } = await import('./api.js');
    await call('POST', '/signout', {});
  } catch (e) {
    if (!(e instanceof ApiError && e.status === 401)) {
      main.prepend(notice('error', e.message));
      return;
    }
  }
  await state.refresh();
  announce('Signed out.');
  window.location.hash = '#/';
  route();
});

document.getElementById('skip').addEventListener('click', (event) => {
  event.preventDefault();
  main.focus();
});

window.addEventListener('hashchange', route);

(async () => {
  try {
    await portal();
    await state.refresh();
  } catch (e) {
    main.replaceChildren(heading('This portal cannot be shown'), notice('error', e.message));
    return;
  }
  route();
})();
