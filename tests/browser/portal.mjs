// Drives the developer portal (and the console's portal page) in headless Chromium, as a
// publisher and developers would. Run by tests/portal_browser.rs, which starts `sluice
// serve`, makes a draft product with a plain and a streaming API, and passes:
//   SLUICE_PORTAL_URL       the dashboard's base URL
//   SLUICE_PORTAL_KEY       an admin key
//   SLUICE_PORTAL_GATEWAY   the gateway's base URL
//   SLUICE_PORTAL_RECEIVER  a receiver's base URL (the webhook subscriber)
//   SLUICE_PORTAL_SHOTS     a directory for the PNG screenshots
//   SLUICE_PORTAL_ASYNCAPI  where to save the downloaded AsyncAPI document
//   CHROMIUM                the browser (default /usr/bin/chromium)
// Prints SUBSCRIPTION_SECRET=<secret> for the test to check the delivery's signature.
// Exits 0 when every scenario passed; otherwise prints the failed step and exits 1.

import assert from 'node:assert/strict';
import path from 'node:path';
import { chromium } from 'playwright-core';

const base = process.env.SLUICE_PORTAL_URL;
const adminKey = process.env.SLUICE_PORTAL_KEY;
const gateway = process.env.SLUICE_PORTAL_GATEWAY;
const receiver = process.env.SLUICE_PORTAL_RECEIVER;
const shots = process.env.SLUICE_PORTAL_SHOTS;
const asyncapiOut = process.env.SLUICE_PORTAL_ASYNCAPI;
assert.ok(base && adminKey && gateway && receiver && shots && asyncapiOut, 'the SLUICE_PORTAL_* variables are required');

const DESKTOP = { width: 1280, height: 900 };
const PASSWORD = 'a long enough passphrase';
const started = Date.now();
const log = (text) => console.log(`[${((Date.now() - started) / 1000).toFixed(1)}s] ${text}`);

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  args: ['--no-sandbox', '--disable-dev-shm-usage'],
});

/** A browser context of its own (cookies included), with a page that fails on errors. */
async function person() {
  const context = await browser.newContext({ viewport: DESKTOP, reducedMotion: 'reduce', acceptDownloads: true });
  context.setDefaultTimeout(10_000);
  const page = await context.newPage();
  page.errors = [];
  page.on('pageerror', (e) => page.errors.push(`uncaught: ${e.message}`));
  page.on('console', (m) => {
    if (m.type() === 'error' && !/status of (401|403|404|409)/.test(m.text())) page.errors.push(m.text());
  });
  return { context, page };
}

const publisher = await person();
const alice = await person();
let current = publisher.page;

async function shot(page, name) {
  await page.screenshot({ path: path.join(shots, `${name}.png`), fullPage: true });
}

async function step(name, run) {
  const t = Date.now();
  try {
    await run();
  } catch (e) {
    log(`FAILED: ${name}`);
    console.error(e);
    await current.screenshot({ path: path.join(shots, 'failure.png') }).catch(() => {});
    await browser.close();
    process.exit(1);
  }
  log(`ok: ${name} (${Date.now() - t} ms)`);
}

/** Calls the portal's API from `page`, as its own scripts would (same origin, cookies). */
async function portalFetch(page, method, rest, { csrf, json } = {}) {
  return page.evaluate(async ([m, r, c, j]) => {
    const org = (await (await fetch('/portal/api/instance')).json()).org_id;
    const headers = { 'Content-Type': 'application/json' };
    if (c) headers['X-CSRF-Token'] = c;
    const resp = await fetch(`/portal/api/orgs/${org}${r}`, { method: m, headers, body: j ? JSON.stringify(j) : undefined, credentials: 'same-origin' });
    return { status: resp.status, body: await resp.json().catch(() => null) };
  }, [method, rest, csrf || null, json || null]);
}

async function signUp(page, email) {
  await page.goto(`${base}/portal/#/signup`);
  await page.getByLabel('E-mail address').fill(email);
  await page.getByLabel('Password').fill(PASSWORD);
  await page.getByRole('button', { name: 'Sign up' }).click();
  await page.getByRole('heading', { name: 'My apps', level: 1 }).waitFor();
}

await step('the publisher publishes the product and opens sign-up in the console', async () => {
  const page = publisher.page;
  await page.goto(base);
  await page.getByLabel('Dashboard API key').fill(adminKey);
  await page.keyboard.press('Enter');
  await page.getByRole('heading', { name: 'APIs', level: 1 }).waitFor();
  await page.getByRole('link', { name: 'Portal', exact: true }).click();
  await page.getByRole('heading', { name: 'Portal', level: 1 }).waitFor();
  const row = page.getByRole('row').filter({ hasText: 'Orders' });
  await row.getByText('draft').waitFor();
  await page.getByRole('button', { name: 'Publish Orders' }).click();
  await row.getByText('published').waitFor();
  await page.getByLabel('Who may sign up').selectOption('open');
  await page.getByRole('button', { name: 'Save' }).click();
  await page.getByText('settings are saved').waitFor();
  await shot(page, 'console-portal');
});

await step('the catalogue shows the published product to anyone', async () => {
  current = alice.page;
  const page = alice.page;
  const resp = await page.goto(`${base}/portal/`);
  assert.equal(resp.status(), 200);
  assert.match(resp.headers()['content-security-policy'], /script-src 'self'/);
  await page.getByRole('heading', { name: 'APIs', level: 1 }).waitFor();
  await page.getByRole('link', { name: 'Orders', exact: true }).waitFor();
  await shot(page, 'catalogue');
});

await step('a session planted before sign-up is replaced', async () => {
  const host = new URL(base).hostname;
  await alice.context.addCookies([{ name: 'sluice_portal', value: 'sk_plantedplantedplantedplantedplantedplanted', domain: host, path: '/portal' }]);
  await signUp(alice.page, 'alice@example.com');
  const cookies = await alice.context.cookies(`${base}/portal/`);
  const session = cookies.find((c) => c.name === 'sluice_portal');
  assert.ok(session && !session.value.includes('planted'), JSON.stringify(cookies));
  assert.equal(session.httpOnly, true);
  assert.equal(session.sameSite, 'Strict');
  // The page's scripts cannot read it.
  assert.equal(await alice.page.evaluate(() => document.cookie.includes('sluice_portal=')), false);
});

await step('the product page documents the streams, with examples and the AsyncAPI document', async () => {
  const page = alice.page;
  await page.getByRole('link', { name: 'APIs', exact: true }).click();
  await page.getByRole('link', { name: 'Orders', exact: true }).click();
  await page.getByRole('heading', { name: 'Orders', level: 1 }).waitFor();
  await page.getByText('GET /pets/pets').waitFor();
  const post = page.getByLabel('curl example for /publish', { exact: true });
  assert.match(await post.textContent(), /curl -X POST '.*\/orders\/publish'/);
  const sse = page.getByLabel('EventSource example for /events', { exact: true });
  assert.match(await sse.textContent(), /new EventSource\(".*\/orders\/events"\)/);
  const [download] = await Promise.all([
    page.waitForEvent('download'),
    page.getByRole('link', { name: 'Download the AsyncAPI document' }).click(),
  ]);
  await download.saveAs(asyncapiOut);
  await shot(page, 'product');
});

let appId;
let key;
await step('an app gets a key, and the key works at the gateway', async () => {
  const page = alice.page;
  await page.getByRole('link', { name: 'My apps' }).click();
  await page.getByLabel('Name').fill('Shop');
  await page.getByLabel('Product').selectOption({ label: 'Orders' });
  await page.getByRole('button', { name: 'Make the app' }).click();
  key = (await page.locator('code[data-secret]').textContent()).trim();
  assert.ok(key.length > 20, key);
  await shot(page, 'apps');
  const refused = await fetch(`${gateway}/pets/pets`);
  assert.equal(refused.status, 401);
  const allowed = await fetch(`${gateway}/pets/pets`, { headers: { Authorization: key } });
  assert.equal(allowed.status, 200, await allowed.text());
  await page.getByRole('link', { name: 'Shop', exact: true }).click();
  await page.getByRole('heading', { name: 'Shop', level: 1 }).waitFor();
  appId = decodeURIComponent(page.url().split('#/apps/')[1]);
});

await step('a subscription gets the event a stream publishes, and the log shows it', async () => {
  const page = alice.page;
  await page.getByLabel('URL').fill(`${receiver}/hook`);
  await page.getByLabel('order.created').check();
  await page.getByRole('button', { name: 'Subscribe' }).click();
  const secret = (await page.locator('code[data-secret]').textContent()).trim();
  assert.equal(secret.length, 64, secret);
  console.log(`SUBSCRIPTION_SECRET=${secret}`);
  const published = await fetch(`${gateway}/orders/publish`, {
    method: 'POST',
    headers: { Authorization: key, 'Content-Type': 'application/json' },
    body: JSON.stringify({ order: 42 }),
  });
  assert.ok(published.ok, `${published.status} ${await published.text()}`);
  await page.getByRole('button', { name: 'Send a test event' }).click();
  await page.getByText('test event is on its way').waitFor();
  // Delivered within a few seconds; the log is read again until it says so.
  const deadline = Date.now() + 20_000;
  for (;;) {
    await page.getByRole('button', { name: 'Refresh' }).click();
    const delivered = page.getByRole('row').filter({ hasText: 'order.created' }).filter({ hasText: 'delivered' });
    if (await delivered.count()) break;
    assert.ok(Date.now() < deadline, 'the delivery did not show as delivered');
    await page.waitForTimeout(250);
  }
  await shot(page, 'app');
});

await step('writes without the CSRF token, or with another session\'s, are refused', async () => {
  const page = alice.page;
  const bare = await portalFetch(page, 'POST', '/apps', { json: { name: 'X', product_id: 'p' } });
  assert.equal(bare.status, 403);
  const session = await portalFetch(page, 'GET', '/session');
  const mallory = await person();
  await mallory.page.goto(`${base}/portal/`);
  const other = await portalFetch(mallory.page, 'GET', '/session');
  assert.notEqual(other.body.csrf, session.body.csrf);
  const wrong = await portalFetch(page, 'POST', '/apps', { csrf: other.body.csrf, json: { name: 'X', product_id: 'p' } });
  assert.equal(wrong.status, 403);
  await mallory.context.close();
});

await step('a second developer sees none of the first one\'s apps', async () => {
  const bob = await person();
  current = bob.page;
  await signUp(bob.page, 'bob@example.com');
  await bob.page.getByText('No apps yet').waitFor();
  const peek = await portalFetch(bob.page, 'GET', `/apps/${encodeURIComponent(appId)}`);
  assert.equal(peek.status, 404);
  const session = await portalFetch(bob.page, 'GET', '/session');
  const take = await portalFetch(bob.page, 'POST', `/apps/${encodeURIComponent(appId)}/key`, { csrf: session.body.csrf, json: {} });
  assert.equal(take.status, 404);
  assert.deepEqual(bob.page.errors, []);
  await bob.context.close();
});

await step('signing out ends the session', async () => {
  current = alice.page;
  await alice.page.getByRole('button', { name: 'Sign out' }).click();
  await alice.page.getByRole('link', { name: 'Sign in' }).waitFor();
  const apps = await portalFetch(alice.page, 'GET', '/apps');
  assert.equal(apps.status, 401);
});

await step('the pages logged no errors (no CSP violation, no exception)', async () => {
  assert.deepEqual(publisher.page.errors, []);
  assert.deepEqual(alice.page.errors, []);
});

await browser.close();
log('all portal scenarios passed');
