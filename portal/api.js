// The portal's one way to its API. The session is an HttpOnly cookie the page never
// sees; every write also carries the CSRF token that GET .../session hands out, which a
// page on another site can neither read nor send.

import { ApiError } from '/console/api.js';

export { ApiError };

let org = null;
let csrf = '';

/** The organisation whose portal this is: `?org=` or the instance's own. */
export async function portal() {
  if (org) return org;
  const named = new URLSearchParams(window.location.search).get('org');
  if (named) {
    org = named;
  } else {
    const found = await request('GET', '/portal/api/instance');
    org = found.org_id;
  }
  return org;
}

/** A path under this portal's API. */
export function path(rest) {
  return `/portal/api/orgs/${encodeURIComponent(org)}${rest}`;
}

async function request(method, url, json) {
  const headers = { Accept: 'application/json' };
  let body;
  if (json !== undefined) {
    body = JSON.stringify(json);
    headers['Content-Type'] = 'application/json';
  }
  if (method !== 'GET') headers['X-CSRF-Token'] = csrf;
  let resp;
  try {
    resp = await fetch(url, { method, headers, body, credentials: 'same-origin', cache: 'no-store' });
  } catch {
    throw new ApiError(0, null);
  }
  let data = null;
  if ((resp.headers.get('Content-Type') || '').includes('json')) {
    data = await resp.json().catch(() => null);
  }
  if (!resp.ok) throw new ApiError(resp.status, data);
  if (data && typeof data.csrf === 'string') csrf = data.csrf;
  return data;
}

/** Calls this portal's API at `rest`; resolves to the JSON answer. */
export function call(method, rest, json) {
  return request(method, path(rest), json);
}

/** The published products, the catalogue's pages read in turn (ten at the most). */
export async function catalogue() {
  let products = [];
  for (let p = 1; p <= 10; p += 1) {
    const page = await call('GET', `/products?p=${p}`);
    products = products.concat(page.products);
    if (p >= page.pages) break;
  }
  return products;
}

/** Who is signed in (`developer` null when nobody), and whether sign-up is open. */
export function session() {
  return call('GET', '/session');
}
