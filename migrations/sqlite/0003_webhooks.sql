-- Webhook deliveries and the developer portal.

-- The delivery queue: every call the service owes a receiver, kept until it is delivered
-- or given up on. `id` is also the Idempotency-Key header, the same on every attempt. A
-- worker claims a due row by moving `lease_until` past now, so several processes can
-- share one queue without sending a row twice at once. Times are unix milliseconds.
CREATE TABLE deliveries (
    id              TEXT PRIMARY KEY NOT NULL,
    org_id          TEXT NOT NULL,
    source          TEXT NOT NULL,
    event           TEXT NOT NULL,
    method          TEXT NOT NULL,
    url             TEXT NOT NULL,
    headers         TEXT NOT NULL,
    body            BLOB NOT NULL,
    secret_sealed   TEXT,
    status          TEXT NOT NULL,
    attempts        INTEGER NOT NULL,
    max_attempts    INTEGER NOT NULL,
    next_attempt_at INTEGER NOT NULL,
    lease_until     INTEGER NOT NULL,
    last_status     INTEGER,
    last_error      TEXT,
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL
);
CREATE INDEX deliveries_due ON deliveries (status, next_attempt_at);
CREATE INDEX deliveries_org ON deliveries (org_id, status, created_at);

-- One row per attempt: when, what came back, how long it took.
CREATE TABLE delivery_attempts (
    delivery_id TEXT NOT NULL REFERENCES deliveries (id) ON DELETE CASCADE,
    attempt     INTEGER NOT NULL,
    at          INTEGER NOT NULL,
    status      INTEGER,
    error       TEXT,
    latency_ms  INTEGER NOT NULL,
    PRIMARY KEY (delivery_id, attempt)
);

-- API products of the developer portal. `events` (a JSON array) are those open to
-- webhook subscription; a stream publishes to a product with its publish secret, kept
-- encrypted.
CREATE TABLE portal_products (
    id                    TEXT PRIMARY KEY NOT NULL,
    org_id                TEXT NOT NULL REFERENCES orgs (id) ON DELETE CASCADE,
    name                  TEXT NOT NULL,
    description           TEXT NOT NULL,
    api_ids               TEXT NOT NULL,
    webhooks_enabled      INTEGER NOT NULL,
    events                TEXT NOT NULL,
    publish_secret_sealed TEXT NOT NULL,
    created_at            INTEGER NOT NULL,
    updated_at            INTEGER NOT NULL
);
CREATE INDEX portal_products_org ON portal_products (org_id);

-- Developer apps, each on one product.
CREATE TABLE portal_apps (
    id         TEXT PRIMARY KEY NOT NULL,
    org_id     TEXT NOT NULL REFERENCES orgs (id) ON DELETE CASCADE,
    product_id TEXT NOT NULL REFERENCES portal_products (id) ON DELETE CASCADE,
    name       TEXT NOT NULL,
    developer  TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
);
CREATE INDEX portal_apps_product ON portal_apps (product_id);

-- An app's webhook subscriptions: where to send, the subscriber's HMAC secret (kept
-- encrypted) and the chosen events (a JSON array).
CREATE TABLE portal_subscriptions (
    id            TEXT PRIMARY KEY NOT NULL,
    org_id        TEXT NOT NULL REFERENCES orgs (id) ON DELETE CASCADE,
    app_id        TEXT NOT NULL REFERENCES portal_apps (id) ON DELETE CASCADE,
    url           TEXT NOT NULL,
    secret_sealed TEXT NOT NULL,
    events        TEXT NOT NULL,
    created_at    INTEGER NOT NULL,
    updated_at    INTEGER NOT NULL
);
CREATE INDEX portal_subscriptions_app ON portal_subscriptions (app_id);
