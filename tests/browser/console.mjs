// Drives the dashboard's web console in headless Chromium, as an operator would, against
// a running dashboard. Run by tests/console.rs, which starts the dashboard, creates the
// API named in SLUICE_CONSOLE_API and passes:
//   SLUICE_CONSOLE_URL   the dashboard's base URL
//   SLUICE_CONSOLE_KEY   an admin key
//   SLUICE_CONSOLE_API   the name of an API created through the management API
//   SLUICE_CONSOLE_SHOTS a directory for the PNG screenshots
//   SLUICE_CONSOLE_GATEWAY the gateway's base URL (the console runs under `sluice serve`)
//   CHROMIUM             the browser (default /usr/bin/chromium)
// Exits 0 when every scenario passed; otherwise prints the failed step and exits 1.

import assert from 'node:assert/strict';
import path from 'node:path';
import { chromium } from 'playwright-core';

const base = process.env.SLUICE_CONSOLE_URL;
const adminKey = process.env.SLUICE_CONSOLE_KEY;
const existingApi = process.env.SLUICE_CONSOLE_API;
const shots = process.env.SLUICE_CONSOLE_SHOTS;
const gateway = process.env.SLUICE_CONSOLE_GATEWAY;
assert.ok(base && adminKey && existingApi && shots && gateway, 'SLUICE_CONSOLE_URL, _KEY, _API, _SHOTS and _GATEWAY are required');

const DESKTOP = { width: 1280, height: 800 };
const PHONE = { width: 390, height: 844 };
const MAX_ASSET_BYTES = 300 * 1024;

const started = Date.now();
const log = (text) => console.log(`[${((Date.now() - started) / 1000).toFixed(1)}s] ${text}`);

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  // Root in a container has no user namespaces for Chromium's sandbox.
  args: ['--no-sandbox', '--disable-dev-shm-usage'],
});
const context = await browser.newContext({ viewport: DESKTOP, reducedMotion: 'reduce' });
context.setDefaultTimeout(10_000);
const page = await context.newPage();

// Anything the page logs as an error (a CSP violation, an uncaught exception) fails the run.
const pageErrors = [];
page.on('pageerror', (e) => pageErrors.push(`uncaught: ${e.message}`));
page.on('console', (m) => {
  // A refused request is logged by the browser itself; the scenarios expect some.
  if (m.type() === 'error' && !/status of (401|404|409|422|400)/.test(m.text())) pageErrors.push(m.text());
});
// Bytes of the console's own files, per page load.
let assetBytes = 0;
page.on('response', async (resp) => {
  const url = new URL(resp.url());
  if (url.pathname === '/' || url.pathname.startsWith('/console/')) {
    const body = await resp.body().catch(() => Buffer.alloc(0));
    assetBytes += body.length;
  }
});

/** Calls the management API from the page, as any script could, with `key`. */
async function api(method, apiPath, key = adminKey) {
  return page.evaluate(async ([m, p, k]) => {
    const resp = await fetch(p, { method: m, headers: { Authorization: `Bearer ${k}` } });
    return { status: resp.status, body: await resp.json().catch(() => null) };
  }, [method, apiPath, key]);
}

async function shot(name) {
  await page.screenshot({ path: path.join(shots, `${name}.png`), fullPage: false });
}

/** Every form control, button and link has an accessible name. */
async function assertLabelled(where) {
  const unnamed = await page.evaluate(() => {
    const named = (el) => {
      if (el.getAttribute('aria-label') || el.getAttribute('aria-labelledby') || el.getAttribute('title')) return true;
      if (el.labels && el.labels.length) return true;
      if (['BUTTON', 'A'].includes(el.tagName)) return el.textContent.trim().length > 0;
      return false;
    };
    return [...document.querySelectorAll('input, select, textarea, button, a[href]')]
      .filter((el) => el.offsetParent !== null || el.id === 'skip')
      .filter((el) => !named(el))
      .map((el) => el.outerHTML.slice(0, 120));
  });
  assert.deepEqual(unnamed, [], `controls without a label on ${where}`);
}

async function step(name, run) {
  const t = Date.now();
  try {
    await run();
  } catch (e) {
    log(`FAILED: ${name}`);
    console.error(e);
    await page.screenshot({ path: path.join(shots, 'failure.png') }).catch(() => {});
    await browser.close();
    process.exit(1);
  }
  log(`ok: ${name} (${Date.now() - t} ms)`);
}

await step('the first page is small and secure, and how fast it is interactive is logged', async () => {
  const t = Date.now();
  const resp = await page.goto(base);
  assert.equal(resp.status(), 200);
  const headers = resp.headers();
  assert.match(headers['content-security-policy'], /script-src 'self'/);
  assert.equal(headers['x-content-type-options'], 'nosniff');
  assert.equal(headers['referrer-policy'], 'no-referrer');
  assert.equal(headers['x-frame-options'], 'DENY');
  await page.getByLabel('Dashboard API key').waitFor();
  const interactive = Date.now() - t;
  log(`sign-in form interactive after ${interactive} ms, ${assetBytes} bytes of assets`);
  // Reported, not asserted: speed is measured, never a pass/fail threshold here.
  assert.ok(assetBytes < MAX_ASSET_BYTES, `${assetBytes} bytes`);
  // The key field has focus, so typing signs in without a pointer.
  assert.equal(await page.evaluate(() => document.activeElement.id), 'key');
  await assertLabelled('sign-in');
  await shot('sign-in');
});

await step('a wrong key is refused with a visible message', async () => {
  await page.keyboard.type('sk_not-a-key');
  await page.keyboard.press('Enter');
  const alert = page.getByRole('alert');
  await alert.waitFor();
  assert.match(await alert.textContent(), /refused/);
  assert.ok(await page.locator('#nav').isHidden());
});

await step('the admin key signs in, from the keyboard', async () => {
  await page.getByLabel('Dashboard API key').fill('');
  await page.keyboard.type(adminKey);
  await page.keyboard.press('Enter');
  await page.getByRole('heading', { name: 'APIs', level: 1 }).waitFor();
  assert.ok(await page.locator('#nav').isVisible());
  // Nothing of the session is stored in the browser.
  const stored = await page.evaluate(() => localStorage.length + sessionStorage.length + document.cookie.length);
  assert.equal(stored, 0);
});

await step('the APIs page lists an API created through the API', async () => {
  const row = page.getByRole('row').filter({ hasText: existingApi });
  await row.waitFor();
  assert.match(await row.textContent(), /Plain/);
  assert.match(await row.textContent(), /Active/);
  await assertLabelled('APIs');
});

const BROKEN = `openapi: 3.0.3
info:
  title: Orders
  version: "1.0"
paths: {}
x-sluice-api-gateway:
  info:
    name: Orders stream
  server:
    listenPath:
      value: /orders/
x-sluice-streaming:
  streams:
    main:
      input:
        http_server:
          pathh: /publish
      output:
        http_server:
          stream_path: /events
`;

await step('a broken definition shows positioned problems and saves nothing', async () => {
  await page.getByRole('link', { name: 'New streaming API' }).click();
  await page.getByRole('heading', { name: 'New streaming API' }).waitFor();
  const editor = page.getByLabel('Definition (YAML or JSON)');
  await editor.fill(BROKEN);
  await page.getByRole('button', { name: 'Create' }).click();
  const problem = page.locator('button.problem').filter({ hasText: 'pathh' });
  await problem.waitFor();
  const text = await problem.textContent();
  // The unknown key is on line 17, column 11.
  assert.match(text, /^17:11 /, text);
  await page.getByRole('alert').filter({ hasText: 'Not saved' }).waitFor();
  assert.equal(await page.locator('.gutter span.bad').textContent(), '17');
  // Choosing the problem puts the caret on it.
  await problem.click();
  const caret = await editor.evaluate((el) => el.value.slice(0, el.selectionStart).split('\n').length);
  assert.equal(caret, 17);
  await assertLabelled('the editor');
  await shot('editor-problems');
  const listed = await api('GET', '/api/apis/streams?p=-1');
  assert.equal(listed.status, 200);
  assert.ok(!listed.body.apis.some((a) => a.name === 'Orders stream'), 'the broken API was saved');
  // A document that does not even parse is placed too.
  await editor.fill('openapi: 3.0.3\ninfo: [\n');
  await page.getByRole('button', { name: 'Check' }).click();
  await page.locator('button.problem').filter({ hasText: /^3:1 / }).waitFor();
});

await step('a good definition saves and appears in the list', async () => {
  await page.getByLabel('Definition (YAML or JSON)').fill(BROKEN.replace('pathh:', 'path:'));
  await page.getByRole('button', { name: 'Check' }).click();
  await page.getByText('No problems').waitFor();
  await page.getByRole('button', { name: 'Create' }).click();
  await page.getByRole('heading', { name: 'APIs', level: 1 }).waitFor();
  const row = page.getByRole('row').filter({ hasText: 'Orders stream' });
  await row.waitFor();
  assert.match(await row.textContent(), /Streaming/);
  assert.match(await row.textContent(), /\/orders/);
  assert.match(await row.textContent(), /Active/);
});

await step('the new API can be deactivated', async () => {
  await page.getByRole('button', { name: 'Deactivate Orders stream' }).click();
  const row = page.getByRole('row').filter({ hasText: 'Orders stream' });
  await row.filter({ hasText: 'Inactive' }).waitFor();
  const listed = await api('GET', '/api/apis/streams?p=-1');
  const orders = listed.body.apis.find((a) => a.name === 'Orders stream');
  assert.equal(orders.active, false);
  await page.getByRole('button', { name: 'Activate Orders stream' }).waitFor();
  await shot('apis');
});

await step('a streaming API is made from a template asset', async () => {
  await page.getByRole('link', { name: 'New streaming API' }).click();
  await page.getByLabel('Start from template').selectOption('events-template');
  const editor = page.getByLabel('Definition (YAML or JSON)');
  // The starter becomes the part merged onto the template.
  assert.match(await editor.inputValue(), /^# Merged onto the template/);
  await editor.fill((await editor.inputValue()).replace('name: My stream', 'name: From template'));
  await page.getByRole('button', { name: 'Create' }).click();
  await page.getByRole('row').filter({ hasText: 'From template' }).waitFor();
  const listed = await api('GET', '/api/apis/streams?p=-1');
  const made = listed.body.apis.find((a) => a.name === 'From template');
  const doc = await api('GET', `/api/apis/streams/${made.id}`);
  assert.equal(doc.body.info.title, 'Events', 'the template was not used');
});

await step('an API opens in the editor and saves unchanged', async () => {
  await page.getByRole('link', { name: 'Edit Orders stream' }).click();
  await page.getByRole('heading', { name: 'Edit Orders stream' }).waitFor();
  assert.match(await page.getByLabel('Definition (YAML or JSON)').inputValue(), /"stream_path": "\/events"/);
  await page.getByRole('button', { name: 'Save' }).click();
  await page.getByRole('heading', { name: 'APIs', level: 1 }).waitFor();
  await page.getByRole('row').filter({ hasText: 'Orders stream' }).filter({ hasText: 'Inactive' }).waitFor();
});

await step('a streaming API has a live view of its graph', async () => {
  await page.getByRole('link', { name: 'Live view of Orders stream' }).click();
  await page.getByRole('heading', { name: /^Live: / }).waitFor();
  const graph = page.getByRole('list', { name: /^Graph of stream / }).first();
  await graph.waitFor();
  const kinds = await graph.locator('.node .node-kind').allTextContents();
  assert.equal(kinds[0], 'input');
  assert.equal(kinds[kinds.length - 1], 'output');
  await page.getByRole('link', { name: 'Back to the APIs' }).click();
  await page.getByRole('heading', { name: 'APIs', level: 1 }).waitFor();
});

await step('a running stream shows its rates move and its tail', async () => {
  await page.getByRole('link', { name: 'Live view of Ticker' }).click();
  await page.getByRole('heading', { name: 'Live: ticker' }).waitFor();
  await page.locator('.graph .node').first().waitFor();
  const kinds = await page.locator('.graph .node .node-kind').allTextContents();
  assert.deepEqual(kinds, ['input', 'processor', 'output']);
  assert.equal(await page.locator('#live-status .notice').count(), 0, 'the streams run in this process');
  // Its state, from the API's status.
  await page.locator('.stream-state', { hasText: 'running' }).first().waitFor();
  // The stream connections open on the API, by key: none on this one.
  await page.getByRole('region', { name: 'Open clients by key' }).getByText('None.').waitFor();
  await page.getByRole('button', { name: 'Tail of stream main' }).click();
  // Messages posted to the gateway, as a producer would, for a few seconds.
  let posted = 0;
  const producer = (async () => {
    for (let i = 1; i <= 30; i += 1) {
      const resp = await fetch(`${gateway}/ticker/publish`, { method: 'POST', body: `tick ${i}`, headers: { Authorization: 'Bearer hidden-token' } });
      assert.equal(resp.status, 200);
      posted = i;
      await new Promise((r) => setTimeout(r, 100));
    }
  })();
  // The tail shows what the output delivered (after the mapping), credentials hidden.
  await page.locator('.tail li pre').filter({ hasText: /^TICK \d+$/ }).first().waitFor();
  // The rates move: some node passes messages at more than zero a second.
  await page.waitForFunction(() => [...document.querySelectorAll('.rate-out')]
    .some((el) => parseFloat(el.textContent.replace(/,/g, '')) > 0));
  await producer;
  assert.equal(posted, 30);
  const tail = await page.locator('.tail').textContent();
  assert.ok(!tail.includes('hidden-token'), 'a credential shows in the tail');
  const points = await page.locator('.graph .node polyline').first().getAttribute('points');
  assert.ok(points && points.split(' ').length >= 2, 'the chart has no points');
  await assertLabelled('live');
  await shot('live');
  await page.getByRole('button', { name: 'Tail of stream main' }).click();
  await page.getByRole('link', { name: 'Back to the APIs' }).click();
  await page.getByRole('heading', { name: 'APIs', level: 1 }).waitFor();
  // The APIs list shows the request rate of each API while requests come in.
  let more = true;
  const again = (async () => {
    while (more) {
      await fetch(`${gateway}/ticker/publish`, { method: 'POST', body: 'tock' });
      await new Promise((r) => setTimeout(r, 50));
    }
  })();
  await page.waitForFunction(() => {
    const cell = document.querySelector('[data-rate-of="ticker"]');
    return cell && parseFloat(cell.textContent.replace(/,/g, '')) > 0;
  });
  more = false;
  await again;
});

await step('the APIs page reads at phone width', async () => {
  await page.setViewportSize(PHONE);
  const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  assert.ok(overflow <= 0, `the page is ${overflow}px wider than the screen`);
  await shot('apis-phone');
  await page.setViewportSize(DESKTOP);
});

await step('certificates are listed with their expiry flagged', async () => {
  await page.getByRole('link', { name: 'Certificates' }).click();
  await page.getByRole('heading', { name: 'Certificates', level: 1 }).waitFor();
  await page.getByRole('table', { name: 'Certificates' }).waitFor();
  const soon = page.getByRole('row').filter({ hasText: 'legacy.example.com' });
  assert.match(await soon.textContent(), /Expires in \d+ days?/);
  const later = page.getByRole('row').filter({ hasText: 'api.example.com' });
  assert.doesNotMatch(await later.textContent(), /Expire/);
  await assertLabelled('certificates');
  await shot('certificates');
});

await step('a webhook is created and deleted', async () => {
  await page.getByRole('link', { name: 'Webhooks' }).click();
  await page.getByRole('heading', { name: 'Webhooks', level: 1 }).waitFor();
  await page.getByLabel('Name').fill('Audit trail');
  await page.getByLabel('Method').selectOption('POST');
  await page.getByLabel('Target URL').fill('https://hooks.example.com/audit');
  await page.getByLabel('Headers').fill('X-Token: t0ken');
  await page.getByRole('button', { name: 'Create webhook' }).click();
  const row = page.getByRole('row').filter({ hasText: 'Audit trail' });
  await row.waitFor();
  const hooks = await api('GET', '/api/hooks?p=-1');
  const made = hooks.body.hooks.find((x) => x.name === 'Audit trail');
  assert.deepEqual(made.header_map, { 'X-Token': 't0ken' });
  // The delivery log answers, or says plainly that there is none.
  await page.locator('.deliveries').getByText(/Webhook deliveries|keeps no delivery log/).first().waitFor();
  await assertLabelled('webhooks');
  await shot('webhooks');
  page.once('dialog', (d) => d.accept());
  await page.getByRole('button', { name: 'Delete webhook Audit trail' }).click();
  await row.waitFor({ state: 'detached' });
  const after = await api('GET', '/api/hooks?p=-1');
  assert.ok(!after.body.hooks.some((x) => x.name === 'Audit trail'));
});

await step('a dashboard key is created, then revoked and refused', async () => {
  await page.getByRole('link', { name: 'Keys' }).click();
  await page.getByRole('heading', { name: 'Keys', level: 1 }).waitFor();
  await page.getByRole('button', { name: 'Create key' }).click();
  const fresh = page.locator('#new-key');
  await fresh.waitFor();
  const key = (await fresh.textContent()).trim();
  assert.match(key, /^sk_/);
  assert.equal((await api('GET', '/api/keys', key)).status, 200);
  const id = (await page.locator('.new-key strong').textContent()).replace('New key ', '').trim();
  await assertLabelled('keys');
  await shot('keys');
  page.once('dialog', (d) => d.accept());
  await page.getByRole('button', { name: `Revoke key ${id}` }).click();
  await page.getByRole('button', { name: `Revoke key ${id}` }).waitFor({ state: 'detached' });
  assert.equal(await page.locator('#new-key').count(), 0, 'the revoked key is still shown');
  assert.equal((await api('GET', '/api/keys', key)).status, 401);
});

await step('the mapping playground runs a mapping and places its problems', async () => {
  await page.getByRole('link', { name: 'Mapping' }).click();
  await page.getByRole('heading', { name: 'Mapping playground', level: 1 }).waitFor();
  const output = page.locator('#mapping-output');
  // The example runs at once: the server's own executor computed the total.
  await page.waitForFunction(() => document.querySelector('#mapping-output').textContent.includes('"total": 7.5'));
  assert.match(await output.textContent(), /"name": "ADA"/);
  assert.match(await page.locator('#mapping-output-metadata').textContent(), /"topic": "orders"/);
  await page.getByLabel('Input message').fill('{"name": "bob", "items": []}');
  await page.waitForFunction(() => document.querySelector('#mapping-output').textContent.includes('"name": "BOB"'));
  await page.getByLabel('Mapping', { exact: true }).fill('root = this\nroot.x = this.name.nope()\n');
  const problem = page.locator('#mapping-problems .problem').first();
  await problem.waitFor();
  assert.match(await problem.textContent(), /^2:\d+ /);
  assert.equal(await output.textContent(), '');
  await assertLabelled('mapping');
  await page.getByLabel('Mapping', { exact: true }).fill('root = this\nroot.total = this.items.map_each(i -> i.price).sum()\n');
  await page.getByLabel('Input message').fill('{"items": [{"price": 2}, {"price": 40}]}');
  await page.waitForFunction(() => document.querySelector('#mapping-output').textContent.includes('"total": 42'));
  await shot('mapping');
});

await step('a gateway key is made for an API with a rate and quota, then revoked', async () => {
  await page.getByRole('link', { name: 'Keys' }).click();
  await page.getByRole('heading', { name: 'Gateway keys', level: 2 }).waitFor();
  await page.getByLabel('APIs it opens').selectOption('ticker');
  await page.getByLabel('Rate limit (requests)').fill('50');
  await page.getByLabel('Quota (requests)').fill('1000');
  await page.getByRole('button', { name: 'Create gateway key' }).click();
  const token = (await page.locator('#new-gateway-key').textContent()).trim();
  assert.ok(token.length > 20, 'no key shown');
  const listed = await api('GET', '/api/gateway/keys');
  assert.equal(listed.body.keys.length, 1);
  const made = listed.body.keys[0];
  assert.deepEqual(Object.keys(made.access_rights), ['ticker']);
  assert.equal(made.rate_limit.rate, 50);
  assert.equal(made.quota.max, 1000);
  await assertLabelled('gateway keys');
  page.once('dialog', (d) => d.accept());
  await page.getByRole('button', { name: `Revoke gateway key ${made.key_id}` }).click();
  await page.getByRole('button', { name: `Revoke gateway key ${made.key_id}` }).waitFor({ state: 'detached' });
  assert.equal((await api('GET', '/api/gateway/keys')).body.keys.length, 0);
});

await step('a fresh visit with a warm browser is logged with its time to interactive', async () => {
  // A new context has no cache: every asset of the first page is fetched again.
  const times = [];
  for (let i = 0; i < 5; i += 1) {
    const fresh = await browser.newContext({ viewport: DESKTOP });
    const p = await fresh.newPage();
    const t = Date.now();
    await p.goto(base);
    await p.getByLabel('Dashboard API key').waitFor();
    times.push(Date.now() - t);
    await fresh.close();
  }
  times.sort((a, b) => a - b);
  log(`fresh visits, sign-in form interactive after ${times.join(', ')} ms (median ${times[2]} ms)`);
});

await step('the page logged no errors (no CSP violation, no exception)', async () => {
  assert.deepEqual(pageErrors, []);
});

await browser.close();
log('all console scenarios passed');
