-- Gateway keys: the gateway looks a request's key up by its hash, never by the key itself.
CREATE TABLE gateway_keys (
    id         TEXT PRIMARY KEY,
    hash       TEXT NOT NULL UNIQUE,
    org_id     TEXT NOT NULL,
    policy     TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
);
CREATE INDEX gateway_keys_org_id ON gateway_keys (org_id);

-- API definitions: the OpenAPI document as text.
CREATE TABLE apis (
    id         TEXT PRIMARY KEY,
    org_id     TEXT NOT NULL,
    document   TEXT NOT NULL,
    updated_at BIGINT NOT NULL
);

-- Change counters, one row per kind of resource, bumped in the same transaction as the
-- change so that a reader who sees a new revision also sees the change.
CREATE TABLE revisions (
    name     TEXT PRIMARY KEY,
    revision BIGINT NOT NULL
);
INSERT INTO revisions (name, revision) VALUES ('apis', 0);
