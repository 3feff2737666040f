// The console's one way to the management API. The key lives in this module's memory
// only (never in storage or a cookie) and goes out as `Authorization: Bearer <key>`:
// browsers never attach such a header on their own, so another site cannot make this
// browser act with it (no CSRF), and a reload forgets it.

let key = null;
let onRefused = () => {};

/** An answer other than 2xx, with the API's message and, for documents, its problems. */
export class ApiError extends Error {
  constructor(status, body) {
    super((body && body.Message) || (status ? `The dashboard answered ${status}.` : 'The dashboard cannot be reached.'));
    this.status = status;
    this.body = body;
    /** `{path, message, line?, column?}` for a document that does not parse or compile. */
    this.problems = (body && Array.isArray(body.Errors)) ? body.Errors : [];
  }
}

export const session = {
  start(k) { key = k; },
  end() { key = null; },
  get active() { return key !== null; },
  /** Called when a signed-in request is refused with 401 (the key was revoked). */
  onRefused(f) { onRefused = f; },
};

/**
 * Calls the API. `json` sends a JSON body, `text` a text body of type `type`; `query`
 * adds parameters; `as` tries a key other than the session's (signing in). Resolves to
 * the parsed JSON answer (or null), rejects with ApiError.
 */
export async function call(method, path, { json, text, type, query, as } = {}) {
  const using = as === undefined ? key : as;
  const url = new URL(path, window.location.origin);
  for (const [name, value] of Object.entries(query || {})) {
    if (value !== undefined && value !== null && value !== '') url.searchParams.set(name, value);
  }
  const headers = { Accept: 'application/json' };
  if (using !== null) headers.Authorization = `Bearer ${using}`;
  let body;
  if (json !== undefined) {
    body = JSON.stringify(json);
    headers['Content-Type'] = 'application/json';
  } else if (text !== undefined) {
    body = text;
    headers['Content-Type'] = type || 'text/plain';
  }
  let resp;
  try {
    resp = await fetch(url, { method, headers, body, credentials: 'omit', cache: 'no-store' });
  } catch {
    throw new ApiError(0, null);
  }
  let data = null;
  if ((resp.headers.get('Content-Type') || '').includes('json')) {
    data = await resp.json().catch(() => null);
  }
  if (!resp.ok) {
    const error = new ApiError(resp.status, data);
    if (resp.status === 401 && as === undefined && key !== null) onRefused(error);
    throw error;
  }
  return data;
}
