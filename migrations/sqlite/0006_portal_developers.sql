-- The developers of each organisation's portal, and what lets them in.

-- Who may sign up (`open`, `invite` or `off`) and which of the organisation's
-- webhooks, if any, carries password-reset tokens. No row means sign-up is off.
CREATE TABLE portal_settings (
    org_id        TEXT PRIMARY KEY REFERENCES orgs (id) ON DELETE CASCADE,
    signup        TEXT NOT NULL,
    reset_hook_id TEXT,
    updated_at    INTEGER NOT NULL
);

-- A developer belongs to one organisation's portal; the password is an Argon2id hash.
CREATE TABLE portal_developers (
    id            TEXT PRIMARY KEY,
    org_id        TEXT NOT NULL REFERENCES orgs (id) ON DELETE CASCADE,
    email         TEXT NOT NULL,
    password_hash TEXT NOT NULL,
    created_at    INTEGER NOT NULL,
    updated_at    INTEGER NOT NULL,
    UNIQUE (org_id, email)
);

-- Signed-in sessions, by a hash of the cookie's token.
CREATE TABLE portal_sessions (
    token_hash   TEXT PRIMARY KEY,
    developer_id TEXT NOT NULL REFERENCES portal_developers (id) ON DELETE CASCADE,
    org_id       TEXT NOT NULL,
    created_at   INTEGER NOT NULL,
    expires_at   INTEGER NOT NULL
);
CREATE INDEX portal_sessions_developer ON portal_sessions (developer_id);

-- One-time tokens, by hash: invitations to sign up (`invite`) and password resets
-- (`reset`), each for one e-mail address.
CREATE TABLE portal_tokens (
    token_hash TEXT PRIMARY KEY,
    kind       TEXT NOT NULL,
    org_id     TEXT NOT NULL REFERENCES orgs (id) ON DELETE CASCADE,
    email      TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL
);
CREATE INDEX portal_tokens_email ON portal_tokens (org_id, kind, email);

-- An app a developer made (`developer_id`), whether its access to the product is
-- `approved`, `pending` or `rejected`, and the gateway key it holds.
ALTER TABLE portal_apps ADD COLUMN developer_id TEXT REFERENCES portal_developers (id) ON DELETE CASCADE;
ALTER TABLE portal_apps ADD COLUMN status TEXT NOT NULL DEFAULT 'approved';
ALTER TABLE portal_apps ADD COLUMN key_id TEXT;
CREATE INDEX portal_apps_developer ON portal_apps (developer_id);
