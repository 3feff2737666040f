// Certificates: the organisation's certificates with their validity (expired and soon
// expiring ones highlighted), PEM upload and delete.

import { call } from '../api.js';
import { announce, button, field, h, heading, notice, show, table, time } from '../ui.js';

/** Certificates that expire within this many days are flagged. */
const SOON_DAYS = 30;

export async function render(view) {
  const message = h('div', { class: 'messages' });
  const list = h('div', {}, h('p', { class: 'loading' }, 'Loading certificates\u2026'));
  const refresh = () => load(list, message);
  view.replaceChildren(heading('Certificates'), message, list, uploadForm(message, refresh));
  await refresh();
}

async function load(list, message) {
  let certs;
  try {
    certs = (await call('GET', '/api/certs', { query: { p: -1 } })).cert_basics || [];
  } catch (e) {
    show(list, notice('error', `The certificates could not be listed: ${e.message}`));
    return;
  }
  const rows = certs.map((c) => {
    const name = c.subject_cn || c.id.slice(0, 16);
    return [
      h('span', {}, name, c.is_ca ? h('span', { class: 'badge info' }, 'CA') : null),
      c.issuer_cn,
      c.dns_names.length ? c.dns_names.join(', ') : '\u2014',
      expiry(c.not_after),
      c.has_private ? 'Yes' : 'No',
      h('div', { class: 'actions' },
        button('Delete', async () => {
          if (!window.confirm(`Delete the certificate \u201c${name}\u201d and its key?`)) return;
          try {
            await call('DELETE', `/api/certs/${encodeURIComponent(c.id)}`);
            show(message, notice('ok', `${name} was deleted.`));
            announce(`${name} was deleted.`);
            await load(list, message);
          } catch (e) {
            show(message, notice('error', e.message));
          }
        }, { class: 'small danger', 'aria-label': `Delete certificate ${name}` })),
    ];
  });
  show(list, table('Certificates', ['Subject', 'Issuer', 'DNS names', 'Valid until', 'Private key', 'Actions'], rows,
    'No certificates yet.'));
}

/** The end of validity, flagged when past or near. */
function expiry(notAfter) {
  const end = new Date(notAfter).getTime();
  const days = Math.floor((end - Date.now()) / 86400000);
  let flag = null;
  if (end <= Date.now()) flag = h('span', { class: 'badge bad' }, 'Expired');
  else if (days < SOON_DAYS) flag = h('span', { class: 'badge warn' }, days < 1 ? 'Expires today' : `Expires in ${days} day${days === 1 ? '' : 's'}`);
  return h('span', { class: flag ? 'expiry flagged' : 'expiry' }, time(notAfter), flag ? ' ' : null, flag);
}

function uploadForm(message, refresh) {
  const file = h('input', { type: 'file', id: 'cert-file', accept: '.pem,.crt,.cer,.key,application/x-pem-file,text/plain' });
  const pem = h('textarea', { id: 'cert-pem', rows: '8', spellcheck: 'false', placeholder: '-----BEGIN CERTIFICATE-----' });
  file.addEventListener('change', async () => {
    const chosen = file.files && file.files[0];
    if (chosen) pem.value = await chosen.text();
  });
  const form = h('form', { class: 'card' },
    h('h2', {}, 'Upload a certificate'),
    field('PEM file', file, 'Reads the file into the text below; nothing is sent until you upload.'),
    field('PEM text', pem, 'The chain, leaf first, optionally followed by the leaf\u2019s unencrypted private key.'),
    h('button', { type: 'submit' }, 'Upload'));
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    try {
      const outcome = await call('POST', '/api/certs', { text: pem.value, type: 'application/x-pem-file' });
      show(message, notice('ok', `Certificate ${outcome.ID.slice(0, 16)}\u2026 was added.`));
      announce('The certificate was added.');
      form.reset();
      await refresh();
    } catch (e) {
      show(message, notice('error', `Not uploaded: ${e.message}`));
    }
  });
  return form;
}
