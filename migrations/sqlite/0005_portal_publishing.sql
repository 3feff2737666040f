-- What the developer portal shows: published products only. `key_approval` says whether
-- a developer who asks for access gets a key at once (`auto`) or once the publisher
-- approved (`manual`).
ALTER TABLE portal_products ADD COLUMN published INTEGER NOT NULL DEFAULT 0;
ALTER TABLE portal_products ADD COLUMN key_approval TEXT NOT NULL DEFAULT 'auto';
CREATE INDEX portal_products_published ON portal_products (org_id, published);
