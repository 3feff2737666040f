-- Finished deliveries (delivered or dead) are removed once they are older than the
-- worker's `webhooks.retention`; this finds them by when they finished.
CREATE INDEX deliveries_finished ON deliveries (status, updated_at);

-- What one receiver (a webhook, a handler or a subscription) has waiting is counted
-- when deliveries to it are queued.
CREATE INDEX deliveries_source ON deliveries (source, status);
