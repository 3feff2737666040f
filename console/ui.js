// Small DOM helpers. Text always goes in as text (never parsed as HTML), so nothing
// the API returns can inject markup or script.

let ids = 0;

/** A new unique element id with a readable prefix. */
export function uid(prefix) {
  ids += 1;
  return `${prefix}-${ids}`;
}

/**
 * An element: `h('button', {class: 'x', onclick: f, 'aria-label': 'y'}, 'text', child)`.
 * Props starting with `on` become listeners, `class` the class name, `text` the text,
 * booleans set or omit an attribute; everything else is an attribute.
 */
export function h(tag, props = {}, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(props || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith('on') && typeof value === 'function') {
      el.addEventListener(name.slice(2), value);
    } else if (name === 'class') {
      el.className = value;
    } else if (name === 'text') {
      el.textContent = value;
    } else if (name === 'value') {
      el.value = value;
    } else if (value === true) {
      el.setAttribute(name, '');
    } else {
      el.setAttribute(name, String(value));
    }
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    if (Array.isArray(child)) append(el, child);
    else el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

/** A labelled control: the label names it, and an optional hint describes it. */
export function field(label, control, hint) {
  if (!control.id) control.id = uid('field');
  const parts = [h('label', { for: control.id }, label), control];
  if (hint) {
    const hintId = uid('hint');
    control.setAttribute('aria-describedby', hintId);
    parts.push(h('small', { id: hintId, class: 'hint' }, hint));
  }
  return h('div', { class: 'field' }, parts);
}

/** A table with a caption and header cells; `rows` are arrays of cells. */
export function table(caption, headers, rows, empty) {
  const body = rows.length
    ? rows.map((cells) => h('tr', {}, cells.map((c, i) => h('td', { 'data-label': headers[i] }, c))))
    : [h('tr', {}, h('td', { colspan: headers.length, class: 'empty' }, empty || 'Nothing here yet.'))];
  return h('div', { class: 'table-wrap' },
    h('table', {},
      h('caption', {}, caption),
      h('thead', {}, h('tr', {}, headers.map((t) => h('th', { scope: 'col' }, t)))),
      h('tbody', {}, body)));
}

/** A message in the page: `kind` is `info`, `ok` or `error` (errors are alerts). */
export function notice(kind, text) {
  return h('p', { class: `notice ${kind}`, role: kind === 'error' ? 'alert' : 'status' }, text);
}

/** Puts `node` (or nothing) into a region, replacing what was there. */
export function show(region, node) {
  region.replaceChildren(...(node ? [node] : []));
}

/** Says `text` to assistive technology without moving focus. */
export function announce(text) {
  const region = document.getElementById('announce');
  if (!region) return;
  region.textContent = '';
  // A change after clearing is announced even when the text repeats.
  window.setTimeout(() => { region.textContent = text; }, 30);
}

/** An RFC 3339 time as the reader's local date and time, in a <time> element. */
export function time(iso) {
  if (!iso) return '';
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return iso;
  return h('time', { datetime: iso }, d.toLocaleString());
}

/** A button that runs `action`, disabled while it runs. */
export function button(text, action, props = {}) {
  const el = h('button', { type: 'button', ...props }, text);
  el.addEventListener('click', async () => {
    el.disabled = true;
    try {
      await action();
    } finally {
      el.disabled = false;
    }
  });
  return el;
}

/** The page heading, focused after a page change so that reading starts there. */
export function heading(text) {
  return h('h1', { tabindex: '-1' }, text);
}
