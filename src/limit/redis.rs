//! The Redis backend: every gateway sharing one Redis enforces one combined limit.
//!
//! Each check is one Lua script (sent once, then run by its SHA), so the read, the decision
//! and the write are atomic however many gateways check the same bucket at once. The rate
//! script takes "now" from the Redis server's `TIME`, never from the gateway, so gateways
//! whose clocks disagree still share one clock. Keys carry a TTL that ends when their state
//! stops mattering, so idle buckets vanish by themselves.
//!
//! Keys: `{prefix}rate:{bucket}` holds the TAT in microseconds of the Redis clock;
//! `{prefix}quota:{bucket}` holds the period's count and expires when the period ends.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::Script;

use super::{units_ceil, Decision, Gcra, LimitError, Rate};

const MICRO: Duration = Duration::from_micros(1);
const MILLI: Duration = Duration::from_millis(1);

/// GCRA in Redis time. KEYS[1]: the bucket's TAT; ARGV[1]: interval and ARGV[2]: allowance,
/// both in microseconds. Returns {allowed (1/0), TAT after the request minus now, wait
/// until one request would pass}, in microseconds.
///
/// Lua numbers are doubles: microseconds since the epoch (about 2^51) are exact, and the
/// TAT is written with `%.0f` because Lua's default formatting would round it to 14 digits.
const RATE_SCRIPT: &str = r"
if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = tonumber(ARGV[1])
local allowance = tonumber(ARGV[2])
local tat = tonumber(redis.call('GET', KEYS[1])) or now
if tat < now then tat = now end
local ahead = tat + interval - now
if ahead > allowance then
  return {0, tat - now, ahead - allowance}
end
redis.call('SET', KEYS[1], string.format('%.0f', now + ahead),
  'PX', string.format('%.0f', math.ceil(ahead / 1000)))
return {1, ahead, 0}
";

/// Fixed-period quota. KEYS[1]: the period's count; ARGV[1]: max; ARGV[2]: renewal in
/// milliseconds. Returns {allowed (1/0), count after the request, milliseconds until the
/// period ends (the renewal when no period runs)}.
const QUOTA_SCRIPT: &str = r"
local max = tonumber(ARGV[1])
local renewal = tonumber(ARGV[2])
local count = tonumber(redis.call('GET', KEYS[1])) or 0
if count >= max then
  local ttl = redis.call('PTTL', KEYS[1])
  if ttl == -1 then
    -- A count without an expiry would refuse forever; give it a period.
    redis.call('PEXPIRE', KEYS[1], renewal)
    ttl = renewal
  elseif ttl < 0 then
    ttl = renewal
  end
  return {0, count, ttl}
end
count = redis.call('INCR', KEYS[1])
local ttl = renewal
if count == 1 then
  redis.call('PEXPIRE', KEYS[1], renewal)
else
  ttl = redis.call('PTTL', KEYS[1])
  if ttl < 0 then
    redis.call('PEXPIRE', KEYS[1], renewal)
    ttl = renewal
  end
end
return {1, count, ttl}
";

/// Rate limits and quotas kept in Redis. Cheap to clone: clones share one connection.
#[derive(Clone)]
pub struct RedisLimiter {
    conn: ConnectionManager,
    inner: Arc<Inner>,
}

struct Inner {
    prefix: String,
    timeout: Duration,
    rate: Script,
    quota: Script,
}

impl RedisLimiter {
    /// Connects to Redis at `url`; keys start with `prefix`, taken verbatim. `timeout`
    /// bounds the connection and each later check, so an unreachable Redis fails a check
    /// rather than stalling the request.
    pub async fn connect(url: &str, prefix: &str, timeout: Duration) -> Result<Self, LimitError> {
        let client = redis::Client::open(url).map_err(|e| redis_error(url, e))?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(timeout)
            .set_response_timeout(timeout)
            // One attempt, no backoff: a failed check makes the manager reconnect, and the
            // next check sees the result, so no request ever waits out a retry delay.
            .set_number_of_retries(0);
        let conn = bounded(timeout, ConnectionManager::new_with_config(client, config))
            .await
            .map_err(|_| {
                LimitError::Redis(format!(
                    "cannot reach Redis at {} within {timeout:?}",
                    place(url)
                ))
            })?
            .map_err(|e| redis_error(url, e))?;
        Ok(RedisLimiter {
            conn,
            inner: Arc::new(Inner {
                prefix: prefix.to_owned(),
                timeout,
                rate: Script::new(RATE_SCRIPT),
                quota: Script::new(QUOTA_SCRIPT),
            }),
        })
    }

    fn key(&self, kind: &str, bucket: &str) -> String {
        let p = &self.inner.prefix;
        let mut key = String::with_capacity(p.len() + kind.len() + bucket.len());
        key.push_str(p);
        key.push_str(kind);
        key.push_str(bucket);
        key
    }

    /// One request against the bucket's rate. Allowed requests consume; refused ones do not.
    pub async fn check_rate(&self, bucket: &str, rate: Rate) -> Result<Decision, LimitError> {
        rate.validate()?;
        let g = Gcra::new(rate, MICRO);
        let mut conn = self.conn.clone();
        let mut call = self.inner.rate.key(self.key("rate:", bucket));
        call.arg(g.interval).arg(g.allowance);
        let (allowed, ahead, wait): (u8, u64, u64) =
            bounded(self.inner.timeout, call.invoke_async(&mut conn))
                .await?
                .map_err(|e| LimitError::Redis(e.to_string()))?;
        Ok(if allowed == 1 {
            Decision {
                allowed: true,
                limit: rate.rate,
                remaining: g.remaining(ahead),
                reset: Duration::from_micros(ahead),
                retry_after: None,
            }
        } else {
            Decision {
                allowed: false,
                limit: rate.rate,
                remaining: 0,
                reset: Duration::from_micros(ahead),
                retry_after: Some(Duration::from_micros(wait)),
            }
        })
    }

    /// One request against the bucket's quota: at most `max` per `renewal`, counted from the
    /// first request of the period; refused requests do not count.
    pub async fn check_quota(
        &self,
        bucket: &str,
        max: u64,
        renewal: Duration,
    ) -> Result<Decision, LimitError> {
        if renewal.is_zero() {
            return Err(LimitError::InvalidQuota);
        }
        // Redis expiries are in whole milliseconds; round up so a period is never short.
        let renewal = units_ceil(renewal, MILLI);
        let mut conn = self.conn.clone();
        let mut call = self.inner.quota.key(self.key("quota:", bucket));
        call.arg(max).arg(renewal);
        let (allowed, count, left): (u8, u64, u64) =
            bounded(self.inner.timeout, call.invoke_async(&mut conn))
                .await?
                .map_err(|e| LimitError::Redis(e.to_string()))?;
        let left = Duration::from_millis(left);
        Ok(Decision {
            allowed: allowed == 1,
            limit: max,
            remaining: max.saturating_sub(count),
            reset: left,
            retry_after: (allowed != 1).then_some(left),
        })
    }

    /// Forgets the bucket's rate and quota state.
    pub async fn reset(&self, bucket: &str) -> Result<(), LimitError> {
        let mut conn = self.conn.clone();
        let mut cmd = redis::cmd("DEL");
        cmd.arg(self.key("rate:", bucket))
            .arg(self.key("quota:", bucket));
        let _: u64 = bounded(self.inner.timeout, cmd.query_async(&mut conn))
            .await?
            .map_err(|e| LimitError::Redis(e.to_string()))?;
        Ok(())
    }
}

impl std::fmt::Debug for RedisLimiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisLimiter")
            .field("prefix", &self.inner.prefix)
            .field("timeout", &self.inner.timeout)
            .finish()
    }
}

/// `fut`, or [`LimitError::Timeout`] once `timeout` has passed.
async fn bounded<T>(timeout: Duration, fut: impl Future<Output = T>) -> Result<T, LimitError> {
    tokio::time::timeout(timeout, fut)
        .await
        .map_err(|_| LimitError::Timeout(timeout))
}

fn redis_error(url: &str, e: redis::RedisError) -> LimitError {
    LimitError::Redis(format!("cannot use Redis at {}: {e}", place(url)))
}

/// Where `url` points, without the password it may carry.
fn place(url: &str) -> String {
    url::Url::parse(url)
        .ok()
        .and_then(|u| {
            u.host_str()
                .map(|h| format!("{h}:{}", u.port().unwrap_or(6379)))
        })
        .unwrap_or_else(|| "the configured address".to_owned())
}
