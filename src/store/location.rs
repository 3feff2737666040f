//! Where a store lives: the URL (or bare path) given to [`Store::open`](super::Store::open),
//! parsed into the backend it names, and its redacted form for messages.

use std::path::PathBuf;
use std::str::FromStr;

use percent_encoding::percent_decode_str;
use sqlx::postgres::PgConnectOptions;

use super::StoreError;

/// A parsed store location.
#[derive(Debug)]
pub(super) enum Location {
    /// A private in-memory SQLite database (`sqlite::memory:`).
    SqliteMemory,
    /// A SQLite file, created if missing.
    SqliteFile(PathBuf),
    /// A PostgreSQL database.
    Postgres(Box<PgConnectOptions>),
}

impl Location {
    /// Parses `url`: `sqlite::memory:`, `sqlite://path`, `sqlite:path`, `postgres://...`,
    /// `postgresql://...`, or a bare file path (a SQLite file).
    pub(super) fn parse(url: &str) -> Result<Location, StoreError> {
        let invalid = |why: &str| StoreError::InvalidUrl(format!("'{}': {why}", redact(url)));
        if url.trim().is_empty() {
            return Err(invalid("it is empty"));
        }
        let Some(scheme) = scheme(url) else {
            return Ok(Location::SqliteFile(PathBuf::from(url)));
        };
        match scheme.to_ascii_lowercase().as_str() {
            "sqlite" => {
                let rest = &url[scheme.len() + 1..];
                if rest == ":memory:" || rest == "//:memory:" {
                    return Ok(Location::SqliteMemory);
                }
                // The store chooses its own SQLite settings (WAL, busy timeout), so a query
                // string would be ignored: reject it rather than silently drop it.
                if rest.contains('?') {
                    return Err(invalid("SQLite URLs take no query parameters"));
                }
                let path = rest.strip_prefix("//").unwrap_or(rest);
                if path.is_empty() {
                    return Err(invalid("the SQLite URL names no file"));
                }
                let path = percent_decode_str(path)
                    .decode_utf8()
                    .map_err(|_| invalid("the file name is not valid UTF-8 once decoded"))?;
                Ok(Location::SqliteFile(PathBuf::from(path.as_ref())))
            }
            "postgres" | "postgresql" => PgConnectOptions::from_str(url)
                .map(|options| Location::Postgres(Box::new(options)))
                .map_err(|e| invalid(&innermost(&e).to_string())),
            other => Err(invalid(&format!(
                "unsupported scheme '{other}' (expected sqlite, postgres or postgresql)"
            ))),
        }
    }
}

/// The deepest cause of `error`: sqlx wraps URL errors in "error with configuration" once
/// or twice, which says nothing the message does not already say.
fn innermost<'a>(
    error: &'a (dyn std::error::Error + 'static),
) -> &'a (dyn std::error::Error + 'static) {
    let mut error = error;
    while let Some(source) = error.source() {
        error = source;
    }
    error
}

/// The scheme of `url` when it has one. A one-letter "scheme" is a Windows drive
/// (`C:\data\store.db`), and a colon later in a plain path (`data/a:b.db`) is no scheme.
fn scheme(url: &str) -> Option<&str> {
    let (scheme, _) = url.split_once(':')?;
    let mut chars = scheme.chars();
    let first = chars.next()?;
    let valid = first.is_ascii_alphabetic()
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    (valid && scheme.len() > 1).then_some(scheme)
}

/// `url` with any password replaced by `***`: the one in the user info
/// (`postgres://user:secret@host`) and a `password=` query parameter.
pub(super) fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return redact_query(url);
    };
    let mut out = format!("{scheme}://");
    // The user info ends at the last '@': a password that was not percent-encoded may
    // itself hold '@', '/' or '?'. Taking the last one can hide more than the password
    // (when a later part holds an '@'), never less.
    let tail = match rest.rsplit_once('@') {
        Some((userinfo, host_and_rest)) => {
            match userinfo.split_once(':') {
                Some((user, _password)) => {
                    out.push_str(user);
                    out.push_str(":***");
                }
                None => out.push_str(userinfo),
            }
            out.push('@');
            host_and_rest
        }
        None => rest,
    };
    out.push_str(&redact_query(tail));
    out
}

/// `text` with the value of a `password=` query parameter replaced by `***`.
fn redact_query(text: &str) -> String {
    let Some((head, query)) = text.split_once('?') else {
        return text.to_owned();
    };
    let pairs: Vec<String> = query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((name, _)) if name.eq_ignore_ascii_case("password") => format!("{name}=***"),
            _ => pair.to_owned(),
        })
        .collect();
    format!("{head}?{}", pairs.join("&"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(url: &str) -> Location {
        Location::parse(url).unwrap_or_else(|e| panic!("{url}: {e}"))
    }

    #[test]
    fn sqlite_forms() {
        assert!(matches!(parse("sqlite::memory:"), Location::SqliteMemory));
        assert!(matches!(parse("sqlite://:memory:"), Location::SqliteMemory));
        for (url, path) in [
            ("sqlite://data/store.db", "data/store.db"),
            ("sqlite:data/store.db", "data/store.db"),
            ("sqlite:///var/lib/sluice.db", "/var/lib/sluice.db"),
            ("SQLite://my%20store.db", "my store.db"),
            ("store.db", "store.db"),
            ("./a/b:c.db", "./a/b:c.db"),
            ("C:\\data\\store.db", "C:\\data\\store.db"),
        ] {
            match parse(url) {
                Location::SqliteFile(p) => assert_eq!(p, PathBuf::from(path), "{url}"),
                other => panic!("{url}: {other:?}"),
            }
        }
    }

    #[test]
    fn postgres_forms() {
        for url in [
            "postgres://user@localhost:5432/db",
            "postgresql://user:pw@localhost/db?sslmode=disable",
        ] {
            assert!(matches!(parse(url), Location::Postgres(_)), "{url}");
        }
    }

    #[test]
    fn bad_urls_are_rejected_without_their_password() {
        for (url, expect) in [
            ("", "empty"),
            ("   ", "empty"),
            (
                "mysql://admin:hunter2@localhost/db",
                "unsupported scheme 'mysql'",
            ),
            ("sqlite://", "names no file"),
            ("sqlite:store.db?mode=ro", "no query parameters"),
            (
                "postgres://u:hunter2@localhost:notaport/db",
                "'postgres://u:***@localhost:notaport/db': invalid port number",
            ),
            (
                "postgres://u@localhost/db?sslmode=bogus&password=hunter2",
                "password=***",
            ),
        ] {
            let err = Location::parse(url).expect_err(url).to_string();
            assert!(err.contains(expect), "{url}: {err}");
            assert!(!err.contains("hunter2"), "{url}: {err}");
        }
    }

    #[test]
    fn redaction() {
        for (url, want) in [
            (
                "postgres://u:secret@h:5432/db",
                "postgres://u:***@h:5432/db",
            ),
            ("postgres://u:p@ss@h/db", "postgres://u:***@h/db"),
            ("postgres://u:p/s?s@h/db", "postgres://u:***@h/db"),
            ("postgres://u@h/db", "postgres://u@h/db"),
            (
                "postgres://h/db?user=u&password=x",
                "postgres://h/db?user=u&password=***",
            ),
            ("sqlite://a/b.db", "sqlite://a/b.db"),
            ("store.db", "store.db"),
        ] {
            assert_eq!(redact(url), want, "{url}");
        }
    }
}
