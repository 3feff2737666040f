// The API editor: a YAML or JSON definition, checked by the dashboard itself with
// `dry_run` (while typing and before every save), its problems listed with their line
// and column and marked in the gutter. Nothing is saved while the dry run fails.

import { ApiError, call } from '../api.js';
import { announce, button, field, h, heading, notice, show } from '../ui.js';
import { MEDIA } from './apis.js';

const STARTERS = {
  streams: `openapi: 3.0.3
info:
  title: My stream
  version: "1.0"
paths: {}
x-sluice-api-gateway:
  info:
    name: My stream
  server:
    listenPath:
      value: /my-stream/
      strip: true
x-sluice-streaming:
  streams:
    main:
      input:
        http_server:
          path: /publish
          allowed_verbs: [POST]
      output:
        http_server:
          stream_path: /events
`,
  oas: `openapi: 3.0.3
info:
  title: My API
  version: "1.0"
paths: {}
x-sluice-api-gateway:
  info:
    name: My API
  upstream:
    url: http://127.0.0.1:9000
  server:
    listenPath:
      value: /my-api/
      strip: true
`,
  // What is posted onto a template: the template brings the rest of the document.
  template: `# Merged onto the template: objects member by member, anything else replaced.
x-sluice-api-gateway:
  info:
    name: My stream
x-sluice-streaming:
  streams:
    main:
      input:
        http_server:
          path: /publish
          allowed_verbs: [POST]
      output:
        http_server:
          stream_path: /events
`,
};

const NOUN = { streams: 'streaming API', oas: 'plain API' };

/** A new API of `kind`, from scratch or (streaming) from a template asset. */
export async function create(view, kind) {
  const editor = makeEditor(STARTERS[kind]);
  let templates = [];
  try {
    const found = await call('GET', '/api/assets', { query: { kind: 'oas-template', p: -1 } });
    templates = found.assets || [];
  } catch {
    // Without templates the editor still works from scratch.
  }
  const template = h('select', { id: 'template' },
    h('option', { value: '' }, 'Nothing: write the whole document'),
    templates.map((t) => h('option', { value: t.id }, `${t.name || t.id} (${t.id})`)));
  template.addEventListener('change', () => {
    // Swap the starter only while the text is still one of the starters.
    if (Object.values(STARTERS).includes(editor.text.value)) {
      editor.set(template.value ? STARTERS.template : STARTERS[kind]);
    }
    editor.check();
  });
  const target = () => ({
    method: 'POST',
    path: `/api/apis/${kind}`,
    query: { templateID: template.value },
  });
  view.replaceChildren(
    heading(`New ${NOUN[kind]}`),
    h('p', {}, 'Write the definition in YAML or JSON. The dashboard checks it as you type; nothing is saved until it is valid.'),
    field('Start from template', template, templates.length
      ? 'An oas-template asset: the document below is merged onto it.'
      : 'No oas-template assets exist in this organisation yet.'),
    form(editor, kind, target, 'Create'));
  editor.check();
}

/** An existing API, shown as JSON (which is YAML too), replaced as a whole on save. */
export async function edit(view, kind, id) {
  const path = `/api/apis/${kind}/${encodeURIComponent(id)}`;
  let doc;
  try {
    doc = await call('GET', path);
  } catch (e) {
    view.replaceChildren(heading(`Edit ${NOUN[kind]}`), notice('error', e.message),
      h('p', {}, h('a', { href: '#/apis' }, 'Back to the APIs')));
    return;
  }
  const name = (doc['x-sluice-api-gateway'] && doc['x-sluice-api-gateway'].info && doc['x-sluice-api-gateway'].info.name) || id;
  const editor = makeEditor(`${JSON.stringify(doc, null, 2)}\n`);
  view.replaceChildren(
    heading(`Edit ${name}`),
    h('p', {}, `The ${NOUN[kind]} `, h('code', {}, id), ', as stored. Saving replaces the whole definition.'),
    form(editor, kind, () => ({ method: 'PUT', path, query: {} }), 'Save'));
}

function form(editor, kind, target, verb) {
  const result = h('div', { class: 'messages' });
  editor.onCheck((problems, error) => editor.report(problems, error));
  editor.validate = async () => {
    const t = target();
    try {
      await call(t.method, t.path, { text: editor.text.value, type: MEDIA[kind], query: { ...t.query, dry_run: 'true' } });
      return { problems: [], error: null };
    } catch (e) {
      if (e instanceof ApiError && e.problems.length) return { problems: e.problems, error: e.message };
      return { problems: [], error: e.message };
    }
  };
  const save = async () => {
    show(result, null);
    const checked = await editor.check(true);
    if (checked.problems.length || checked.error) {
      show(result, notice('error', 'Not saved: the definition has problems (listed below the editor).'));
      editor.focusFirstProblem();
      return;
    }
    const t = target();
    try {
      const outcome = await call(t.method, t.path, { text: editor.text.value, type: MEDIA[kind], query: t.query });
      announce(`Saved ${outcome.ID}.`);
      window.location.hash = '#/apis';
    } catch (e) {
      editor.report(e.problems || [], e.message);
      show(result, notice('error', `Not saved: ${e.message}`));
    }
  };
  return h('div', { class: 'editor-form' },
    editor.element,
    h('div', { class: 'toolbar' },
      button(verb, save),
      button('Check', () => editor.check(true), { class: 'secondary' }),
      h('a', { class: 'button secondary', href: '#/apis' }, 'Cancel')),
    result);
}

/**
 * A text area with line numbers and a problems list. `check()` asks `validate` (set by
 * the form) and shows what it says; typing checks again after a pause.
 */
function makeEditor(initial) {
  const text = h('textarea', {
    id: 'definition', spellcheck: 'false', autocomplete: 'off', wrap: 'off', rows: '24',
    'aria-describedby': 'problems',
  });
  text.value = initial;
  const gutter = h('div', { class: 'gutter', 'aria-hidden': 'true' });
  const status = h('p', { id: 'check-status', class: 'check-status', role: 'status' });
  const list = h('ul', { class: 'problems' });
  const region = h('section', { id: 'problems', class: 'problems-region', 'aria-labelledby': 'problems-title' },
    h('h2', { id: 'problems-title' }, 'Problems'), status, list);
  let bad = new Set();
  let timer = 0;
  let asked = 0;
  let listener = () => {};

  const numbers = () => {
    const count = text.value.split('\n').length;
    const lines = [];
    for (let i = 1; i <= count; i += 1) lines.push(h('span', { class: bad.has(i) ? 'bad' : null }, String(i)));
    gutter.replaceChildren(...lines);
    gutter.scrollTop = text.scrollTop;
  };
  text.addEventListener('input', () => {
    numbers();
    window.clearTimeout(timer);
    timer = window.setTimeout(() => api.check(), 700);
  });
  text.addEventListener('scroll', () => { gutter.scrollTop = text.scrollTop; });

  /** Puts the caret at a 1-based line and column. */
  const go = (line, column) => {
    const lines = text.value.split('\n');
    let offset = 0;
    for (let i = 0; i < Math.min(line - 1, lines.length); i += 1) offset += lines[i].length + 1;
    offset += Math.max(0, Math.min((column || 1) - 1, (lines[line - 1] || '').length));
    text.focus();
    text.setSelectionRange(offset, offset);
  };

  const api = {
    element: h('div', { class: 'editor-block' },
      h('label', { for: 'definition' }, 'Definition (YAML or JSON)'),
      h('div', { class: 'editor' }, gutter, text),
      region),
    text,
    validate: async () => ({ problems: [], error: null }),
    set(value) {
      text.value = value;
      numbers();
    },
    onCheck(f) { listener = f; },
    /** Runs a dry run; only the latest one's answer is shown. */
    async check() {
      window.clearTimeout(timer);
      asked += 1;
      const mine = asked;
      status.textContent = 'Checking\u2026';
      const outcome = await api.validate();
      if (mine === asked) listener(outcome.problems, outcome.error);
      return outcome;
    },
    report(problems, error) {
      bad = new Set(problems.filter((p) => p.line).map((p) => p.line));
      text.setAttribute('aria-invalid', problems.length || error ? 'true' : 'false');
      numbers();
      if (!problems.length && !error) {
        status.textContent = 'No problems: the dashboard accepts this definition.';
        status.className = 'check-status ok';
        list.replaceChildren();
        return;
      }
      status.className = 'check-status error';
      status.textContent = problems.length === 1 ? '1 problem.' : problems.length ? `${problems.length} problems.` : error;
      list.replaceChildren(...problems.map((p) => {
        const where = p.line ? `${p.line}:${p.column || 1}` : 'document';
        const label = h('span', { class: 'where' }, where);
        const what = [p.path ? h('code', {}, p.path) : null, p.path ? ' ' : null, p.message];
        return h('li', {}, p.line
          ? h('button', { type: 'button', class: 'problem', onclick: () => go(p.line, p.column) }, label, ' ', what)
          : h('span', { class: 'problem' }, label, ' ', what));
      }));
    },
    focusFirstProblem() {
      const first = list.querySelector('button.problem');
      if (first) first.focus();
      else text.focus();
    },
  };
  numbers();
  return api;
}
