// The mapping playground: a mapping beside an input message and its result, run by the
// server's own compiler and executor (`POST /api/mapping/run`) as you type, with each
// compile problem at its line and column.

import { ApiError, call } from '../api.js';
import { field, h, heading, notice, show } from '../ui.js';

const EXAMPLE_MAPPING = 'root = this\nroot.name = this.name.uppercase()\nroot.total = this.items.map_each(i -> i.price).sum()\nmeta topic = "orders"\n';
const EXAMPLE_INPUT = '{"name": "ada", "items": [{"price": 3}, {"price": 4.5}]}';

export async function render(view) {
  const mapping = h('textarea', { id: 'mapping-text', rows: 10, spellcheck: 'false', class: 'code' });
  mapping.value = EXAMPLE_MAPPING;
  const input = h('textarea', { id: 'mapping-input', rows: 6, spellcheck: 'false', class: 'code' });
  input.value = EXAMPLE_INPUT;
  const metadata = h('input', { id: 'mapping-metadata', type: 'text', spellcheck: 'false', class: 'code', value: '{}' });
  const output = h('pre', { id: 'mapping-output', class: 'code output', 'aria-live': 'polite' });
  const outMeta = h('pre', { id: 'mapping-output-metadata', class: 'code output' });
  const problems = h('div', { id: 'mapping-problems' });
  const run = h('button', { type: 'submit' }, 'Run');
  const form = h('form', { class: 'card playground', novalidate: true },
    field('Mapping', mapping, 'The message is `this`; assign the result to `root`, metadata with `meta name = ...`.'),
    field('Input message', input),
    field('Input metadata (a JSON object)', metadata),
    run);
  view.replaceChildren(
    heading('Mapping playground'),
    h('p', {}, 'Runs a mapping on one message exactly as a stream would. Mappings here cannot read the host (environment, files) or import others.'),
    form,
    h('section', { class: 'card', 'aria-labelledby': 'mapping-result-title' },
      h('h2', { id: 'mapping-result-title' }, 'Result'),
      problems,
      h('h3', {}, 'Output'), output,
      h('h3', {}, 'Metadata'), outMeta));

  let pending = 0;
  const go = async () => {
    pending += 1;
    const mine = pending;
    let meta;
    try {
      meta = JSON.parse(metadata.value || '{}');
      if (typeof meta !== 'object' || meta === null || Array.isArray(meta)) throw new Error();
    } catch {
      show(problems, notice('error', 'The input metadata must be a JSON object.'));
      return;
    }
    try {
      const result = await call('POST', '/api/mapping/run', { json: { mapping: mapping.value, input: input.value, metadata: meta } });
      if (mine !== pending) return;
      if (result.error) show(problems, notice('error', `The mapping failed on this message: ${result.error}`));
      else if (result.deleted) show(problems, notice('ok', 'The mapping deleted the message.'));
      else show(problems, null);
      output.textContent = result.output === null ? '' : pretty(result.output);
      outMeta.textContent = JSON.stringify(result.metadata, null, 2);
    } catch (e) {
      if (mine !== pending) return;
      output.textContent = '';
      outMeta.textContent = '';
      if (e instanceof ApiError && e.problems.length) {
        show(problems, h('ul', { class: 'problems', 'aria-label': 'Problems' },
          e.problems.map((p) => h('li', {},
            h('button', { type: 'button', class: 'problem', onclick: () => place(mapping, p.line, p.column) },
              h('span', { class: 'where' }, `${p.line}:${p.column}`), ` ${p.message}`)))));
      } else {
        show(problems, notice('error', e.message));
      }
    }
  };
  form.addEventListener('submit', (event) => { event.preventDefault(); go(); });
  let timer = null;
  for (const control of [mapping, input, metadata]) {
    control.addEventListener('input', () => {
      clearTimeout(timer);
      timer = setTimeout(go, 300);
    });
  }
  await go();
}

/** JSON output indented; anything else as it is. */
function pretty(text) {
  try {
    return JSON.stringify(JSON.parse(text), null, 2);
  } catch {
    return text;
  }
}

/** Moves the cursor of `area` to 1-based `line`:`column`. */
function place(area, line, column) {
  const lines = area.value.split('\n');
  let at = 0;
  for (let i = 0; i < Math.min(line - 1, lines.length); i += 1) at += lines[i].length + 1;
  at += Math.max(0, (column || 1) - 1);
  area.focus();
  area.setSelectionRange(at, at);
}
