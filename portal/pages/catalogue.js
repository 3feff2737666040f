// The catalogue: the products this portal publishes, one card each.

import { catalogue } from '../api.js';
import { h, heading, notice } from '/console/ui.js';

export async function render(view) {
  const list = h('div', {}, h('p', { class: 'loading' }, 'Loading the APIs\u2026'));
  view.replaceChildren(
    heading('APIs'),
    h('p', {}, 'The API products published here. Open one for its endpoints, its streams and how to call them; sign in to get a key.'),
    list);
  let products = [];
  try {
    products = await catalogue();
  } catch (e) {
    list.replaceChildren(notice('error', `The catalogue could not be read: ${e.message}`));
    return;
  }
  if (!products.length) {
    list.replaceChildren(notice('info', 'Nothing is published here yet.'));
    return;
  }
  list.replaceChildren(h('ul', { class: 'product-list' }, products.map((p) => h('li', {},
    h('article', { class: 'card' },
      h('h2', {}, h('a', { href: `#/products/${encodeURIComponent(p.id)}` }, p.name)),
      p.description ? h('p', {}, p.description) : null,
      h('p', {}, `${p.apis.length} API${p.apis.length === 1 ? '' : 's'}`,
        p.apis.some((a) => a.streaming) ? h('span', { class: 'badge info' }, 'streaming') : null,
        p.events.length ? h('span', { class: 'badge info' }, 'webhooks') : null,
        h('span', { class: 'badge off' }, p.key_approval === 'manual' ? 'keys on approval' : 'keys at once')))))));
}
