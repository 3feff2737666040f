// Signing in, signing up (openly or with an invitation) and resetting a password.

import { ApiError, call } from '../api.js';
import { reroute, state } from '../app.js';
import { announce, field, h, heading, notice } from '/console/ui.js';

function input(id, type, autocomplete, props = {}) {
  return h('input', { id, name: id, type, autocomplete, required: true, spellcheck: 'false', ...props });
}

/** A form that posts its fields; `done` runs on success. */
function form(title, fields, label, send, done) {
  const message = h('div', { class: 'messages', id: `${title.toLowerCase().replace(/\W+/g, '-')}-message` });
  const el = h('form', { class: 'card signin', novalidate: true },
    heading(title), fields, h('button', { type: 'submit' }, label), message);
  el.addEventListener('submit', async (event) => {
    event.preventDefault();
    try {
      const answer = await send();
      await done(answer, message);
    } catch (e) {
      message.replaceChildren(notice('error', e instanceof ApiError && e.status === 429
        ? 'Too many attempts. Wait a few minutes and try again.'
        : e.message));
    }
  });
  return el;
}

async function signedIn() {
  await state.refresh();
  announce(`Signed in as ${state.developer.email}.`);
  window.location.hash = '#/apps';
  reroute();
}

export async function signIn(view) {
  await state.refresh();
  const email = input('email', 'email', 'username');
  const password = input('password', 'password', 'current-password');
  view.replaceChildren(
    form('Sign in', [field('E-mail address', email), field('Password', password)], 'Sign in',
      () => call('POST', '/signin', { email: email.value, password: password.value }),
      signedIn),
    h('p', { class: 'signin' },
      state.signup !== 'off' ? [h('a', { href: '#/signup' }, 'Sign up'), ' \u00b7 '] : null,
      h('a', { href: '#/reset' }, 'Forgot your password?')));
  email.focus();
}

export async function signUp(view) {
  await state.refresh();
  if (state.signup === 'off') {
    view.replaceChildren(heading('Sign up'), notice('info', 'This portal does not take sign-ups.'));
    return;
  }
  const email = input('email', 'email', 'username');
  const password = input('password', 'password', 'new-password', { minlength: '10', maxlength: '128' });
  const fields = [field('E-mail address', email), field('Password', password, '10 to 128 characters.')];
  let invitation = null;
  if (state.signup === 'invite') {
    invitation = input('invitation', 'text', 'off');
    fields.push(field('Invitation', invitation, 'This portal takes developers by invitation: paste the one you were given.'));
  }
  view.replaceChildren(form('Sign up', fields, 'Sign up', () => call('POST', '/signup', {
    email: email.value,
    password: password.value,
    ...(invitation ? { invitation: invitation.value.trim() } : {}),
  }), signedIn));
  email.focus();
}

export async function reset(view) {
  await state.refresh();
  const email = input('reset-email', 'email', 'username');
  const token = input('reset-token', 'text', 'off');
  const password = input('reset-password', 'password', 'new-password', { minlength: '10', maxlength: '128' });
  view.replaceChildren(
    form('Reset your password', [field('E-mail address', email)], 'Send a reset token',
      () => call('POST', '/password-reset', { email: email.value }),
      (_, message) => { message.replaceChildren(notice('ok', 'If the address has an account, the portal\u2019s operator has a reset token for it. Enter it below.')); }),
    form('Set a new password', [field('Reset token', token), field('New password', password, '10 to 128 characters.')], 'Set the password',
      () => call('POST', '/password-reset/confirm', { token: token.value.trim(), password: password.value }),
      (_, message) => { message.replaceChildren(notice('ok', 'Your password is set. '), h('a', { href: '#/signin' }, 'Sign in')); }));
  email.focus();
}
