//! HTTP/1.1 responses as bytes (RFC 9112), for the connections served without hyper:
//! the head with its framing fields, the cached `date`, and gathered writes.

use std::io::IoSlice;

use bytes::{Buf, Bytes};
use http::header::{self, HeaderMap};
use http::StatusCode;
use tokio::io::{AsyncWrite, AsyncWriteExt};

use crate::http::wire::{put_content_length, put_field};

/// How a response body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// No body follows the head (an answer to HEAD, 1xx, 204, 304).
    None,
    Length(u64),
    Chunked,
}

/// Statuses whose answers have no body (RFC 9110 6.4.1).
pub fn no_body(status: StatusCode) -> bool {
    status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED
}

/// The status line and headers of a response. The framing fields are written from
/// `framing`, never taken from `headers`, except a HEAD answer's `Content-Length`
/// (`keep_length`), which describes the body it would have had.
pub fn encode_head(
    out: &mut Vec<u8>,
    status: StatusCode,
    headers: &HeaderMap,
    framing: Framing,
    keep_length: bool,
    close: bool,
) {
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(status.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(status.canonical_reason().unwrap_or("").as_bytes());
    out.extend_from_slice(b"\r\n");
    let mut dated = false;
    for (name, value) in headers {
        if *name == header::TRANSFER_ENCODING
            || *name == header::CONNECTION
            || (*name == header::CONTENT_LENGTH && !keep_length)
        {
            continue;
        }
        dated |= *name == header::DATE;
        put_field(out, name, value);
    }
    if !dated {
        put_date(out);
    }
    match framing {
        Framing::None => {}
        Framing::Length(n) => put_content_length(out, n),
        Framing::Chunked => out.extend_from_slice(b"transfer-encoding: chunked\r\n"),
    }
    if close {
        out.extend_from_slice(b"connection: close\r\n");
    }
    out.extend_from_slice(b"\r\n");
}

/// Adds a `date` field; its text is made once a second per thread.
fn put_date(out: &mut Vec<u8>) {
    use std::cell::RefCell;
    use std::time::{SystemTime, UNIX_EPOCH};
    thread_local! {
        static DATE: RefCell<(u64, String)> = const { RefCell::new((0, String::new())) };
    }
    let now = SystemTime::now();
    let second = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    DATE.with(|date| {
        let mut date = date.borrow_mut();
        if date.0 != second || date.1.is_empty() {
            *date = (second, httpdate::fmt_http_date(now));
        }
        out.extend_from_slice(b"date: ");
        out.extend_from_slice(date.1.as_bytes());
        out.extend_from_slice(b"\r\n");
    });
}

/// Writes every part, with as few system calls as the stream allows.
pub async fn write_all_vectored<I: AsyncWrite + Unpin>(
    io: &mut I,
    parts: &mut [Bytes],
) -> std::io::Result<()> {
    let mut first = 0;
    while first < parts.len() {
        let slices: Vec<IoSlice<'_>> = parts[first..].iter().map(|p| IoSlice::new(p)).collect();
        let mut n = io.write_vectored(&slices).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        while first < parts.len() && n >= parts[first].len() {
            n -= parts[first].len();
            first += 1;
        }
        if first < parts.len() {
            parts[first].advance(n);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(framing: Framing, keep_length: bool, close: bool) -> String {
        let mut headers = HeaderMap::new();
        headers.insert("content-type", "text/plain".parse().unwrap());
        headers.insert("content-length", "99".parse().unwrap());
        headers.insert("connection", "keep-alive".parse().unwrap());
        headers.insert("transfer-encoding", "gzip".parse().unwrap());
        let mut out = Vec::new();
        encode_head(
            &mut out,
            StatusCode::OK,
            &headers,
            framing,
            keep_length,
            close,
        );
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn framing_fields_come_from_the_framing() {
        let h = head(Framing::Length(5), false, false);
        assert!(
            h.starts_with("HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ndate: "),
            "{h}"
        );
        assert!(h.ends_with(" GMT\r\ncontent-length: 5\r\n\r\n"), "{h}");
        let h = head(Framing::Chunked, false, true);
        assert!(
            h.ends_with("transfer-encoding: chunked\r\nconnection: close\r\n\r\n"),
            "{h}"
        );
        assert!(
            !h.contains("99") && !h.contains("gzip") && !h.contains("keep-alive"),
            "{h}"
        );
        let h = head(Framing::None, true, false);
        assert!(h.contains("content-length: 99\r\n"), "{h}");
    }
}
