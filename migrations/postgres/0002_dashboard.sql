-- Dashboard resources. Every resource belongs to one organisation; the dashboard always
-- queries with the caller's organisation, so another organisation's rows look missing.

CREATE TABLE orgs (
    id         TEXT PRIMARY KEY,
    name       TEXT NOT NULL,
    created_at BIGINT NOT NULL
);

CREATE TABLE users (
    id         TEXT PRIMARY KEY,
    org_id     TEXT NOT NULL REFERENCES orgs (id) ON DELETE CASCADE,
    name       TEXT NOT NULL,
    role       TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    UNIQUE (org_id, name)
);

-- Dashboard API keys: only the SHA-256 of a key is kept; a request's key is found by it.
CREATE TABLE dashboard_keys (
    id         TEXT PRIMARY KEY,
    hash       TEXT NOT NULL UNIQUE,
    user_id    TEXT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    org_id     TEXT NOT NULL REFERENCES orgs (id) ON DELETE CASCADE,
    created_at BIGINT NOT NULL
);
CREATE INDEX dashboard_keys_org_id ON dashboard_keys (org_id);

-- Assets: `id` is the database identifier, `custom_id` the one a client chose.
CREATE TABLE assets (
    id          TEXT PRIMARY KEY,
    org_id      TEXT NOT NULL REFERENCES orgs (id) ON DELETE CASCADE,
    custom_id   TEXT,
    name        TEXT NOT NULL,
    description TEXT NOT NULL,
    kind        TEXT NOT NULL,
    data        TEXT NOT NULL,
    created_at  BIGINT NOT NULL,
    updated_at  BIGINT NOT NULL,
    UNIQUE (org_id, custom_id)
);

-- Certificates: `id` is the SHA-256 fingerprint of the leaf, unique within an
-- organisation. The private key, when given, is kept encrypted (`key_sealed`).
CREATE TABLE certs (
    org_id      TEXT NOT NULL REFERENCES orgs (id) ON DELETE CASCADE,
    id          TEXT NOT NULL,
    subject_cn  TEXT NOT NULL,
    issuer_cn   TEXT NOT NULL,
    not_before  TEXT NOT NULL,
    not_after   TEXT NOT NULL,
    is_ca       BOOLEAN NOT NULL,
    dns_names   TEXT NOT NULL,
    details     TEXT NOT NULL,
    pem         TEXT NOT NULL,
    key_sealed  TEXT,
    created_at  BIGINT NOT NULL,
    PRIMARY KEY (org_id, id)
);

CREATE TABLE hooks (
    id            TEXT PRIMARY KEY,
    org_id        TEXT NOT NULL REFERENCES orgs (id) ON DELETE CASCADE,
    webhook_id    TEXT NOT NULL,
    name          TEXT NOT NULL,
    method        TEXT NOT NULL,
    target_path   TEXT NOT NULL,
    template_path TEXT NOT NULL,
    header_map    TEXT,
    event_timeout BIGINT NOT NULL,
    api_model     TEXT NOT NULL,
    created_at    BIGINT NOT NULL,
    updated_at    BIGINT NOT NULL,
    UNIQUE (org_id, webhook_id)
);
