//! Names of the operator's that streams posted by organisations may not use: the cluster
//! bus's NATS subjects and JetStream stream, and its Redis keys. The bus carries every
//! organisation's HTTP-to-HTTP streams, so a posted stream that could subscribe to its
//! subjects would read other organisations' messages, and one that could publish to them
//! would hand forged events to their clients. The egress policy says which brokers a
//! posted stream may reach; these names say what it may touch there, whatever that policy
//! allows.
//!
//! A name is refused when it is one of the bus's or when it could match one: a NATS
//! subject with `*` or `>` wildcards that covers the bus's subjects, a Redis pattern that
//! covers its keys. Comparisons ignore case, although brokers do not: refusing
//! `SLUICE.BUS.>` costs a tenant nothing and leaves no spelling to argue about.

use std::fmt;

/// The bus's names when the config does not give its own, refused in every case: a
/// dashboard that does not know its gateways' bus still keeps posted streams off these.
pub const DEFAULT_SUBJECT_PREFIX: &str = "sluice.bus";
pub const DEFAULT_STREAM: &str = "SLUICE_BUS";
pub const DEFAULT_KEY_PREFIX: &str = "sluice:bus:";

/// Redis publishes keyspace notifications on channels that name keys (`__keyspace@0__:k`)
/// or carry them (`__keyevent@0__:xadd`): a subscription to them would learn the bus's
/// keys.
const NOTIFICATION_CHANNELS: [&str; 2] = ["__keyspace@", "__keyevent@"];

/// The names posted streams may not use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReservedNames {
    /// NATS subjects `<prefix>.…` (and the prefix itself).
    subject_prefixes: Vec<String>,
    /// JetStream streams.
    streams: Vec<String>,
    /// Redis keys `<prefix>…`.
    key_prefixes: Vec<String>,
}

impl Default for ReservedNames {
    fn default() -> Self {
        ReservedNames {
            subject_prefixes: vec![DEFAULT_SUBJECT_PREFIX.into()],
            streams: vec![DEFAULT_STREAM.into()],
            key_prefixes: vec![DEFAULT_KEY_PREFIX.into()],
        }
    }
}

/// Why a name was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{value}` {why}: streams organisations post may not use the cluster bus's names")]
pub struct Refused {
    pub value: String,
    pub why: String,
}

fn refused(value: &str, why: impl fmt::Display) -> Refused {
    Refused {
        value: value.to_owned(),
        why: why.to_string(),
    }
}

impl ReservedNames {
    /// Also refuses the subjects `<prefix>.…`.
    pub fn add_subject_prefix(&mut self, prefix: &str) {
        push_new(&mut self.subject_prefixes, prefix);
    }

    /// Also refuses the JetStream stream `name`.
    pub fn add_stream(&mut self, name: &str) {
        push_new(&mut self.streams, name);
    }

    /// Also refuses the Redis keys `<prefix>…`.
    pub fn add_key_prefix(&mut self, prefix: &str) {
        push_new(&mut self.key_prefixes, prefix);
    }

    /// Refuses what `other` refuses, too.
    pub fn extend(&mut self, other: &ReservedNames) {
        for p in &other.subject_prefixes {
            self.add_subject_prefix(p);
        }
        for s in &other.streams {
            self.add_stream(s);
        }
        for k in &other.key_prefixes {
            self.add_key_prefix(k);
        }
    }

    /// A NATS subject to subscribe or publish to, wildcards allowed. Refused when it could
    /// match a subject of the bus, and when it reaches the bus's stream through the
    /// JetStream API (`$JS.API.STREAM.DELETE.<stream>`, `$JS.ACK.<stream>.>`, …).
    pub fn check_subject(&self, subject: &str) -> Result<(), Refused> {
        let tokens: Vec<&str> = subject.trim().split('.').collect();
        for prefix in &self.subject_prefixes {
            if subject_overlaps(&tokens, prefix) {
                return Err(refused(
                    subject,
                    format_args!("could match the bus's subjects `{prefix}.>`"),
                ));
            }
        }
        let api = tokens
            .first()
            .is_some_and(|t| *t == "*" || t.eq_ignore_ascii_case("$JS"));
        if api {
            for stream in &self.streams {
                if tokens
                    .iter()
                    .skip(1)
                    .any(|t| matches!(*t, "*" | ">") || t.eq_ignore_ascii_case(stream))
                {
                    return Err(refused(
                        subject,
                        format_args!("could reach the bus's JetStream stream `{stream}`"),
                    ));
                }
            }
        }
        Ok(())
    }

    /// An interpolated subject before it is rendered: refused when the text before its
    /// first `${! … }` already puts every subject it renders among the bus's. What it
    /// renders is checked again with [`check_subject`](Self::check_subject).
    pub fn check_subject_template(&self, source: &str) -> Result<(), Refused> {
        let literal = literal_prefix(source);
        // The tokens the template fixes; the last, unfinished one may grow into anything.
        let mut fixed: Vec<&str> = literal.split('.').collect();
        fixed.pop();
        for prefix in &self.subject_prefixes {
            let want: Vec<&str> = prefix.split('.').collect();
            if fixed.len() >= want.len()
                && fixed
                    .iter()
                    .zip(&want)
                    .all(|(t, p)| token_matches(t, p) || *t == ">")
            {
                return Err(refused(
                    source,
                    format_args!("makes subjects among the bus's `{prefix}.>`"),
                ));
            }
        }
        Ok(())
    }

    /// A JetStream stream's name.
    pub fn check_stream(&self, name: &str) -> Result<(), Refused> {
        match self
            .streams
            .iter()
            .find(|s| s.eq_ignore_ascii_case(name.trim()))
        {
            Some(s) => Err(refused(name, format_args!("is the bus's stream `{s}`"))),
            None => Ok(()),
        }
    }

    /// A Redis key (a stream's, a cache entry's, a limit's).
    pub fn check_key(&self, key: &str) -> Result<(), Refused> {
        match self
            .key_prefixes
            .iter()
            .find(|p| starts_with_ignore_case(key, p))
        {
            Some(p) => Err(refused(key, format_args!("is among the bus's keys `{p}…`"))),
            None => Ok(()),
        }
    }

    /// An interpolated key before it is rendered: refused when its text before the first
    /// `${! … }` is already among the bus's keys.
    pub fn check_key_template(&self, source: &str) -> Result<(), Refused> {
        self.check_key(literal_prefix(source))
            .map_err(|e| refused(source, e.why))
    }

    /// A Redis pub/sub channel, or a glob pattern of channels when `pattern`. Refused when
    /// it could be a keyspace notification channel (which names or carries keys) or could
    /// start with a key prefix of the bus.
    pub fn check_channel(&self, channel: &str, pattern: bool) -> Result<(), Refused> {
        let covers = |start: &str| {
            if pattern {
                glob_may_start_with(channel, start)
            } else {
                starts_with_ignore_case(channel, start)
            }
        };
        if let Some(n) = NOTIFICATION_CHANNELS.iter().find(|n| covers(n)) {
            return Err(refused(
                channel,
                format_args!(
                    "could be a keyspace notification channel `{n}…`, which names the bus's keys"
                ),
            ));
        }
        if let Some(p) = self.key_prefixes.iter().find(|p| covers(p)) {
            return Err(refused(
                channel,
                format_args!("could name the bus's keys `{p}…`"),
            ));
        }
        Ok(())
    }
}

fn push_new(list: &mut Vec<String>, item: &str) {
    if !item.is_empty() && !list.iter().any(|i| i.eq_ignore_ascii_case(item)) {
        list.push(item.to_owned());
    }
}

fn starts_with_ignore_case(text: &str, prefix: &str) -> bool {
    text.len() >= prefix.len()
        && text.as_bytes()[..prefix.len()].eq_ignore_ascii_case(prefix.as_bytes())
}

/// The text of an interpolated string before its first `${! … }` block.
fn literal_prefix(source: &str) -> &str {
    source.find("${!").map_or(source, |i| &source[..i])
}

/// Whether subject token `t` (a literal or `*`) matches the bus's token `p`.
fn token_matches(t: &str, p: &str) -> bool {
    t == "*" || t.eq_ignore_ascii_case(p)
}

/// Whether a subject of `tokens` (wildcards allowed) could match `<prefix>` or a subject
/// below it.
fn subject_overlaps(tokens: &[&str], prefix: &str) -> bool {
    let want: Vec<&str> = prefix.split('.').collect();
    for (i, t) in tokens.iter().enumerate() {
        if *t == ">" {
            return true;
        }
        match want.get(i) {
            // Every token of the prefix matched: what follows is some topic of the bus.
            None => return true,
            Some(p) if token_matches(t, p) => {}
            Some(_) => return false,
        }
    }
    // As many tokens as the prefix, all matching: the prefix itself, refused with it.
    tokens.len() >= want.len()
}

/// One element of a Redis glob pattern.
enum Glob {
    Star,
    One,
    Class {
        negated: bool,
        ranges: Vec<(char, char)>,
    },
    Literal(char),
}

fn parse_glob(pattern: &str) -> Vec<Glob> {
    let mut out = Vec::new();
    let mut chars = pattern.chars().peekable();
    while let Some(c) = chars.next() {
        out.push(match c {
            '*' => Glob::Star,
            '?' => Glob::One,
            '\\' => Glob::Literal(chars.next().unwrap_or('\\')),
            '[' => {
                let negated = chars.next_if_eq(&'^').is_some();
                let mut ranges = Vec::new();
                while let Some(c) = chars.next() {
                    if c == ']' && !ranges.is_empty() {
                        break;
                    }
                    let c = if c == '\\' {
                        chars.next().unwrap_or('\\')
                    } else {
                        c
                    };
                    if chars.peek() == Some(&'-') {
                        chars.next();
                        match chars.next() {
                            Some(']') | None => {
                                ranges.push((c, c));
                                ranges.push(('-', '-'));
                                break;
                            }
                            Some(end) => ranges.push((c.min(end), c.max(end))),
                        }
                    } else {
                        ranges.push((c, c));
                    }
                }
                Glob::Class { negated, ranges }
            }
            c => Glob::Literal(c),
        });
    }
    out
}

/// Whether glob element `g` (not a star) matches `c`, ignoring case.
fn glob_matches(g: &Glob, c: char) -> bool {
    let (lower, upper) = (c.to_ascii_lowercase(), c.to_ascii_uppercase());
    match g {
        Glob::Star | Glob::One => true,
        Glob::Literal(l) => l.eq_ignore_ascii_case(&c),
        Glob::Class { negated, ranges } => {
            let hit = ranges
                .iter()
                .any(|(a, b)| (*a..=*b).contains(&lower) || (*a..=*b).contains(&upper));
            hit != *negated
        }
    }
}

/// Whether glob `pattern` could match some string that starts with `start`. Runs the
/// pattern as a set of positions over `start`'s characters: linear in both, whatever the
/// stars.
fn glob_may_start_with(pattern: &str, start: &str) -> bool {
    let globs = parse_glob(pattern);
    let n = globs.len();
    // `at[i]`: the pattern's first `i` elements can match what was read so far.
    let mut at = vec![false; n + 1];
    at[0] = true;
    let close = |at: &mut Vec<bool>| {
        for i in 0..n {
            if at[i] && matches!(globs[i], Glob::Star) {
                at[i + 1] = true;
            }
        }
    };
    close(&mut at);
    for c in start.chars() {
        let mut next = vec![false; n + 1];
        for i in 0..n {
            if !at[i] {
                continue;
            }
            match &globs[i] {
                Glob::Star => next[i] = true,
                g if glob_matches(g, c) => next[i + 1] = true,
                _ => {}
            }
        }
        close(&mut next);
        if !next.iter().any(|b| *b) {
            return false;
        }
        at = next;
    }
    // `start` is read and the pattern has not failed: what it still wants can follow.
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The names of a bus like the one the cluster used.
    fn names() -> ReservedNames {
        let mut n = ReservedNames::default();
        n.add_subject_prefix("ht29bus");
        n.add_stream("HT29_BUS");
        n.add_key_prefix("ht29:bus:");
        n
    }

    #[test]
    fn subjects_that_could_match_the_bus_are_refused_in_every_spelling() {
        let n = names();
        for subject in [
            "ht29bus.>",
            "ht29bus.*",
            "ht29bus.0a1b2c",
            "ht29bus",
            "HT29BUS.>",
            "Ht29Bus.abc",
            ">",
            "*.>",
            "*.*",
            "*",
            "sluice.bus.>",
            "sluice.*.x",
            "*.bus.>",
            "SLUICE.BUS.abc",
            " ht29bus.> ",
            // The JetStream API on the bus's stream.
            "$JS.API.STREAM.DELETE.HT29_BUS",
            "$JS.API.STREAM.PURGE.ht29_bus",
            "$JS.API.DIRECT.GET.SLUICE_BUS",
            "$JS.ACK.HT29_BUS.>",
            "$js.api.stream.info.*",
            "$JS.API.>",
            "*.API.STREAM.DELETE.HT29_BUS",
        ] {
            let e = n.check_subject(subject).unwrap_err();
            assert_eq!(e.value, subject);
            assert!(e.to_string().contains("cluster bus"), "{e}");
        }
        for subject in [
            "orders.>",
            "orders.*",
            "ht29bus2.>",
            "ht29.bus.x",
            "x.ht29bus.>",
            "events",
            "sluice.orders",
            "sluice",
            "$JS.API.STREAM.LIST",
            "$JS.API.STREAM.INFO.ORDERS",
        ] {
            assert_eq!(n.check_subject(subject), Ok(()), "{subject}");
        }
    }

    #[test]
    fn interpolated_subjects_are_refused_when_their_text_is_the_bus_s() {
        let n = names();
        for t in [
            "ht29bus.${! meta(\"t\") }",
            "HT29BUS.x.${! meta(\"t\") }",
            "*.${! meta(\"t\") }",
            "sluice.bus.${! meta(\"t\") }",
        ] {
            assert!(n.check_subject_template(t).is_err(), "{t}");
        }
        for t in [
            "${! meta(\"t\") }",
            "ht29${! meta(\"t\") }",
            "orders.${! meta(\"t\") }",
            "sluice.${! meta(\"t\") }",
        ] {
            assert_eq!(n.check_subject_template(t), Ok(()), "{t}");
        }
    }

    #[test]
    fn streams_and_keys_of_the_bus_are_refused() {
        let n = names();
        for s in ["HT29_BUS", "ht29_bus", "SLUICE_BUS", "sluice_bus"] {
            assert!(n.check_stream(s).is_err(), "{s}");
        }
        assert_eq!(n.check_stream("ORDERS"), Ok(()));
        assert_eq!(n.check_stream("HT29_BUS2"), Ok(()));
        for k in ["ht29:bus:abc", "HT29:BUS:abc", "ht29:bus:", "sluice:bus:x"] {
            assert!(n.check_key(k).is_err(), "{k}");
        }
        for k in ["ht29:bu", "orders", "sluice:orders", "x:ht29:bus:"] {
            assert_eq!(n.check_key(k), Ok(()), "{k}");
        }
        assert!(n.check_key_template("ht29:bus:${! meta(\"t\") }").is_err());
        assert_eq!(n.check_key_template("ht29:${! meta(\"t\") }"), Ok(()));
    }

    #[test]
    fn channels_and_patterns_that_reach_the_bus_s_keys_are_refused() {
        let n = names();
        for (c, pattern) in [
            ("*", true),
            ("ht29:*", true),
            ("h?29:bus:*", true),
            ("[hx]t29:bus:*", true),
            ("HT29:BUS:*", true),
            ("__keyspace@0__:ht29:bus:abc", false),
            ("__keyspace@*", true),
            ("__key*", true),
            ("_*", true),
            ("__keyevent@0__:xadd", false),
            ("ht29:bus:abc", false),
            ("sluice:*", true),
        ] {
            assert!(n.check_channel(c, pattern).is_err(), "{c} {pattern}");
        }
        for (c, pattern) in [
            ("events.*", true),
            ("ht29:*", false),
            ("ht29:[^b]*", true),
            ("x*", true),
            ("__other", false),
            ("ht\\*", true),
        ] {
            assert_eq!(n.check_channel(c, pattern), Ok(()), "{c} {pattern}");
        }
    }

    #[test]
    fn many_stars_cost_no_more_than_their_length() {
        let pattern = format!("{}x", "*".repeat(10_000));
        assert!(glob_may_start_with(&pattern, "ht29:bus:"));
        assert!(!glob_may_start_with(&"a".repeat(10_000), "ht29:bus:"));
    }

    #[test]
    fn names_added_twice_are_kept_once() {
        let mut n = ReservedNames::default();
        n.add_stream("sluice_bus");
        n.extend(&ReservedNames::default());
        n.add_key_prefix("");
        assert_eq!(n, ReservedNames::default());
    }
}
