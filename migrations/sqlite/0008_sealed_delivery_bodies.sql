-- A delivery whose body carries a secret (a portal's password-reset token) keeps the body
-- it sends here, sealed with the dashboard's secret; `body` is then the copy the delivery
-- log shows, the secret replaced by `[redacted]`.
ALTER TABLE deliveries ADD COLUMN body_sealed TEXT;

-- Reset deliveries queued before kept the token in `body`, which the delivery log
-- shows: their tokens are withdrawn (the developer asks for a new one), their bodies
-- lose the token, and those still waiting are not sent.
DELETE FROM portal_tokens WHERE kind = 'reset';
UPDATE deliveries
SET body = CAST('{"event":"portal.password_reset","token":"[redacted]"}' AS BLOB),
    last_error = CASE WHEN status = 'pending'
        THEN 'withdrawn: the body held a password-reset token in the clear; ask for a new reset'
        ELSE last_error END,
    status = CASE WHEN status = 'pending' THEN 'dead' ELSE status END
WHERE event = 'portal.password_reset' AND source LIKE 'hook:%';
