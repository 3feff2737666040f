//! HTTP/1.1 towards an upstream, as bytes (RFC 9112): the request head the gateway
//! writes, the response head it reads, and how a response body is framed and decoded.
//! No I/O here; the connection code feeds these functions what it has read.

use std::mem::MaybeUninit;

use bytes::{BufMut, Bytes, BytesMut};
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, StatusCode, Version};
use smallvec::SmallVec;

use crate::http::wire::{
    allowed_in_trailer, decimal, field_name, is_hop_by_hop, put_content_length, put_field,
    visible_ascii, ConnectionTokens,
};

/// The most header lines an upstream's response head may carry: hyper's client limit,
/// so that the two refuse the same heads.
const MAX_HEADERS: usize = 100;
/// The largest response head accepted.
pub const MAX_HEAD: usize = 64 * 1024;
/// The longest chunk-size line accepted, and the longest chunk extension (hyper's).
const MAX_CHUNK_LINE: usize = 20 * 1024;
const MAX_CHUNK_EXTENSION: usize = 16 * 1024;
/// The trailer section must be shorter than this, and hold at most `MAX_TRAILERS`
/// lines: hyper's limits, so that the two readers refuse the same responses.
const MAX_TRAILER_SECTION: usize = 16 * 1024;
const MAX_TRAILERS: usize = 100;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("malformed response head: {0}")]
    Head(httparse::Error),
    #[error("response head larger than {MAX_HEAD} bytes")]
    HeadTooLarge,
    #[error("response header `{0}` is not valid")]
    Header(String),
    #[error("invalid Content-Length")]
    ContentLength,
    #[error("malformed chunked body")]
    Chunk,
    #[error("the upstream closed the connection {0} bytes before the end of the body")]
    Truncated(u64),
    #[error("the upstream closed the connection inside a chunked body")]
    TruncatedChunked,
    /// HTTP/1.0 has no transfer codings: such a response's framing is faulty
    /// (RFC 9112 6.1), however its body would otherwise be read.
    #[error("an HTTP/1.0 response with a Transfer-Encoding")]
    CodingInHttp10,
}

/// How a request body is framed on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestFraming {
    None,
    Length(u64),
    Chunked,
}

impl RequestFraming {
    /// The framing for a body that is empty (`None`) or whose exact size is known.
    /// Methods that normally carry a body announce an empty one, which some servers
    /// insist on (411 without it).
    pub fn of(method: &Method, empty: bool, exact: Option<u64>) -> Self {
        if empty {
            let bodiless = matches!(
                *method,
                Method::GET | Method::HEAD | Method::DELETE | Method::OPTIONS | Method::TRACE
            );
            return if bodiless {
                RequestFraming::None
            } else {
                RequestFraming::Length(0)
            };
        }
        match exact {
            Some(n) => RequestFraming::Length(n),
            None => RequestFraming::Chunked,
        }
    }
}

/// Writes a request head: `target` is in origin form (path and query). The framing
/// headers come from `framing`, never from `fields`, so they cannot disagree with the
/// body that follows.
pub fn encode_head<'a>(
    out: &mut BytesMut,
    method: &Method,
    target: &str,
    fields: impl Iterator<Item = (&'a HeaderName, &'a HeaderValue)>,
    framing: RequestFraming,
) {
    out.reserve(256 + target.len() + fields.size_hint().0 * 32);
    out.put_slice(method.as_str().as_bytes());
    out.put_u8(b' ');
    out.put_slice(target.as_bytes());
    out.put_slice(b" HTTP/1.1\r\n");
    for (name, value) in fields {
        if name == header::CONTENT_LENGTH || name == header::TRANSFER_ENCODING {
            continue;
        }
        put_field(out, name, value);
    }
    match framing {
        RequestFraming::None => {}
        RequestFraming::Length(n) => put_content_length(out, n),
        RequestFraming::Chunked => out.put_slice(b"transfer-encoding: chunked\r\n"),
    }
    out.put_slice(b"\r\n");
}

/// A parsed response head.
#[derive(Debug)]
pub struct Head {
    pub status: StatusCode,
    pub version: Version,
    /// The end-to-end fields. Those of the connection (RFC 9110 7.6.1: `Connection` and
    /// the fields it names, `Keep-Alive`, `Transfer-Encoding`, `TE`, `Trailer`,
    /// `Upgrade`, `Proxy-*`) are read into `conn` and left out, except in a `101` answer,
    /// whose fields the client needs whole to take over the connection.
    pub headers: HeaderMap,
    pub conn: ConnFields,
}

/// What the connection and framing fields of a response head said.
#[derive(Debug, Clone)]
pub struct ConnFields {
    /// `Connection: close`.
    pub close: bool,
    /// A `Transfer-Encoding` was sent; `chunked` when its last coding is.
    pub transfer_encoding: Option<bool>,
    /// The `Content-Length`, its every value and list member agreeing; `Err` when they
    /// do not or one is not a number.
    pub content_length: Result<Option<u64>, WireError>,
}

/// Takes a complete response head off the front of `buf`, or `None` when more bytes are
/// needed. Header values share the bytes read rather than being copied.
pub fn parse_head(buf: &mut BytesMut) -> Result<Option<Head>, WireError> {
    let mut slots = [const { MaybeUninit::uninit() }; MAX_HEADERS];
    let mut resp = httparse::Response::new(&mut []);
    let parsed = httparse::ParserConfig::default()
        .parse_response_with_uninit_headers(&mut resp, buf, &mut slots);
    let len = match parsed {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) if buf.len() >= MAX_HEAD => {
            return Err(WireError::HeadTooLarge)
        }
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(WireError::Head(e)),
    };
    let status = StatusCode::from_u16(resp.code.unwrap_or(0))
        .map_err(|_| WireError::Head(httparse::Error::Status))?;
    let version = match resp.version {
        Some(0) => Version::HTTP_10,
        _ => Version::HTTP_11,
    };
    let whole = status == StatusCode::SWITCHING_PROTOCOLS;
    let mut conn = ConnFields {
        close: false,
        transfer_encoding: None,
        content_length: Ok(None),
    };
    // What `Connection` says; the fields it names are dropped with it.
    let mut connection = ConnectionTokens::default();
    // Names are read while `buf` is borrowed; values then point into the split-off head.
    let base = buf.as_ptr() as usize;
    let mut fields: SmallVec<[(HeaderName, std::ops::Range<usize>); 16]> = SmallVec::new();
    for h in resp.headers.iter() {
        let name =
            field_name(h.name.as_bytes()).ok_or_else(|| WireError::Header(h.name.to_owned()))?;
        let keep = if name == header::CONTENT_LENGTH {
            conn.content_length = conn
                .content_length
                .and_then(|prior| content_length(prior, h.value));
            true
        } else if name == header::CONNECTION {
            connection.read(h.value);
            false
        } else if name == header::TRANSFER_ENCODING {
            // As hyper reads it: chunked when the list's last element is, an empty one
            // (`chunked,`) included, and never when the value is not visible ASCII.
            let visible = visible_ascii(h.value);
            let last = h
                .value
                .rsplit(|&b| b == b',')
                .next()
                .map(<[u8]>::trim_ascii);
            conn.transfer_encoding =
                Some(visible && last.is_some_and(|c| c.eq_ignore_ascii_case(b"chunked")));
            false
        } else {
            !is_hop_by_hop(&name)
        };
        if keep || whole {
            let start = h.value.as_ptr() as usize - base;
            fields.push((name, start..start + h.value.len()));
        }
    }
    conn.close = connection.close;
    if !connection.named.is_empty() && !whole {
        fields.retain(|(name, _)| !connection.named.contains(name));
    }
    let head = buf.split_to(len).freeze();
    // Room for the fields the gateway adds to an answer (`X-RateLimit-*`, CORS): growing
    // the map would move it.
    let mut headers = HeaderMap::with_capacity(fields.len() + 4);
    for (name, range) in fields {
        let value = HeaderValue::from_maybe_shared(head.slice(range))
            .map_err(|_| WireError::Header(name.as_str().to_owned()))?;
        headers.append(name, value);
    }
    Ok(Some(Head {
        status,
        version,
        headers,
        conn,
    }))
}

/// Folds one `Content-Length` value into what earlier ones said.
fn content_length(prior: Option<u64>, value: &[u8]) -> Result<Option<u64>, WireError> {
    let mut length = prior;
    for part in value.split(|&b| b == b',').map(|p| p.trim_ascii()) {
        let n = decimal(part).ok_or(WireError::ContentLength)?;
        if length.is_some_and(|l| l != n) {
            return Err(WireError::ContentLength);
        }
        length = Some(n);
    }
    Ok(length)
}

/// How a response body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    Empty,
    Length(u64),
    Chunked,
    /// Until the upstream closes the connection.
    Close,
}

/// The framing of the response to a `method` request (RFC 9112 6.3).
pub fn response_framing(method: &Method, head: &Head) -> Result<Framing, WireError> {
    let status = head.status;
    if *method == Method::HEAD
        || status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED
    {
        return Ok(Framing::Empty);
    }
    if let Some(chunked) = head.conn.transfer_encoding {
        if head.version == Version::HTTP_10 {
            return Err(WireError::CodingInHttp10);
        }
        return Ok(if chunked {
            Framing::Chunked
        } else {
            Framing::Close
        });
    }
    Ok(match head.conn.content_length.clone()? {
        Some(0) => Framing::Empty,
        Some(n) => Framing::Length(n),
        None => Framing::Close,
    })
}

/// Whether the connection can carry another request after this response: HTTP/1.1
/// without `Connection: close`, and framing that says where the body ends. A response
/// with both Content-Length and Transfer-Encoding is answered but its connection is
/// not trusted again (RFC 9112 6.3).
pub fn reusable(head: &Head, framing: Framing) -> bool {
    let length_beside_coding =
        head.conn.transfer_encoding.is_some() && !matches!(head.conn.content_length, Ok(None));
    head.version == Version::HTTP_11
        && framing != Framing::Close
        && !length_beside_coding
        && keeps_open(head)
}

/// Whether the upstream means to keep the connection open after this response (no
/// `Connection: close`).
pub fn keeps_open(head: &Head) -> bool {
    !head.conn.close
}

/// What the decoder could take from the bytes read so far.
#[derive(Debug, PartialEq, Eq)]
pub enum Decoded {
    Data(Bytes),
    /// The trailer fields of a chunked body, which is then complete.
    Trailers(HeaderMap),
    /// More bytes are needed.
    More,
    /// The body is complete.
    Done,
}

/// Decodes a streamed response body as its bytes arrive.
#[derive(Debug)]
pub enum Decoder {
    Length(u64),
    Chunked(Chunk),
    Close,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Chunk {
    Size,
    Data(u64),
    DataEnd,
    Trailers,
    Done,
}

impl Decoder {
    pub fn new(framing: Framing) -> Self {
        match framing {
            Framing::Empty => Decoder::Length(0),
            Framing::Length(n) => Decoder::Length(n),
            Framing::Chunked => Decoder::Chunked(Chunk::Size),
            Framing::Close => Decoder::Close,
        }
    }

    /// The exact number of bytes still to come, when the framing says.
    pub fn remaining(&self) -> Option<u64> {
        match self {
            Decoder::Length(n) => Some(*n),
            Decoder::Chunked(Chunk::Done) => Some(0),
            _ => None,
        }
    }

    pub fn is_done(&self) -> bool {
        self.remaining() == Some(0)
    }

    /// Takes the next piece of body off the front of `buf`.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Decoded, WireError> {
        match self {
            Decoder::Length(0) => Ok(Decoded::Done),
            Decoder::Length(n) => {
                if buf.is_empty() {
                    return Ok(Decoded::More);
                }
                let take = (*n).min(buf.len() as u64);
                *n -= take;
                Ok(Decoded::Data(buf.split_to(take as usize).freeze()))
            }
            Decoder::Close => Ok(if buf.is_empty() {
                Decoded::More
            } else {
                Decoded::Data(buf.split().freeze())
            }),
            Decoder::Chunked(state) => decode_chunked(state, buf),
        }
    }

    /// The upstream closed the connection: the end of a `Close` body, an error for any
    /// other that is not complete.
    pub fn eof(&mut self) -> Result<(), WireError> {
        match self {
            Decoder::Close | Decoder::Length(0) | Decoder::Chunked(Chunk::Done) => {
                *self = Decoder::Length(0);
                Ok(())
            }
            Decoder::Length(n) => Err(WireError::Truncated(*n)),
            Decoder::Chunked(_) => Err(WireError::TruncatedChunked),
        }
    }
}

fn decode_chunked(state: &mut Chunk, buf: &mut BytesMut) -> Result<Decoded, WireError> {
    loop {
        match *state {
            Chunk::Size => match chunk_size_line(buf)? {
                Some((used, size)) => {
                    let _ = buf.split_to(used);
                    *state = if size == 0 {
                        Chunk::Trailers
                    } else {
                        Chunk::Data(size)
                    };
                }
                None if buf.len() > MAX_CHUNK_LINE => return Err(WireError::Chunk),
                None => return Ok(Decoded::More),
            },
            Chunk::Data(n) => {
                if buf.is_empty() {
                    return Ok(Decoded::More);
                }
                let take = n.min(buf.len() as u64);
                *state = if take == n {
                    Chunk::DataEnd
                } else {
                    Chunk::Data(n - take)
                };
                return Ok(Decoded::Data(buf.split_to(take as usize).freeze()));
            }
            Chunk::DataEnd => {
                if buf.len() < 2 {
                    return Ok(Decoded::More);
                }
                if &buf[..2] != b"\r\n" {
                    return Err(WireError::Chunk);
                }
                let _ = buf.split_to(2);
                *state = Chunk::Size;
            }
            Chunk::Trailers => {
                if buf.starts_with(b"\r\n") {
                    let _ = buf.split_to(2);
                    *state = Chunk::Done;
                    continue;
                }
                let Some(end) = memchr::memmem::find(buf, b"\r\n\r\n") else {
                    if buf.len() >= MAX_TRAILER_SECTION {
                        return Err(WireError::Chunk);
                    }
                    return Ok(Decoded::More);
                };
                if end + 4 >= MAX_TRAILER_SECTION {
                    return Err(WireError::Chunk);
                }
                let section = buf.split_to(end + 4);
                *state = Chunk::Done;
                return Ok(Decoded::Trailers(trailers(&section)?));
            }
            Chunk::Done => return Ok(Decoded::Done),
        }
    }
}

/// Reads a chunk-size line as hyper's decoder reads it, so that the two never part ways
/// on where a chunk starts: hex digits (as many as the value fits in 64 bits, leading
/// zeros and all), then optional spaces or tabs, an optional `;` extension up to CR (a
/// bare LF in it is refused, and it is held to 16 KiB), then CRLF. The bytes the line
/// took and the size, or `None` until the line is complete.
fn chunk_size_line(buf: &[u8]) -> Result<Option<(usize, u64)>, WireError> {
    enum At {
        Size,
        Space,
        Extension(usize),
        Lf,
    }
    if buf.first().is_some_and(|b| !b.is_ascii_hexdigit()) {
        return Err(WireError::Chunk);
    }
    let mut size: u64 = 0;
    let mut at = At::Size;
    for (i, &b) in buf.iter().enumerate() {
        at = match (at, b) {
            (At::Size, b) if b.is_ascii_hexdigit() => {
                let digit = (b as char).to_digit(16).unwrap_or_default();
                size = size
                    .checked_mul(16)
                    .and_then(|s| s.checked_add(u64::from(digit)))
                    .ok_or(WireError::Chunk)?;
                At::Size
            }
            (At::Size | At::Space, b' ' | b'\t') => At::Space,
            (At::Size | At::Space, b';') => At::Extension(0),
            (At::Size | At::Space | At::Extension(_), b'\r') => At::Lf,
            (At::Extension(_), b'\n') => return Err(WireError::Chunk),
            (At::Extension(n), _) if n + 1 >= MAX_CHUNK_EXTENSION => return Err(WireError::Chunk),
            (At::Extension(n), _) => At::Extension(n + 1),
            (At::Lf, b'\n') => return Ok(Some((i + 1, size))),
            _ => return Err(WireError::Chunk),
        };
    }
    Ok(None)
}

/// The fields of a trailer section (ending in its first empty line, CRLF CRLF), as the
/// client gets them: without those a trailer may not carry. HTTP/2 clients get them as
/// they are, so they are left out here and not only where HTTP/1.1 writes them.
///
/// The section is read as hyper's client reads it, so that the two never part ways on
/// where a response ends or what it carries: a CR must start a CRLF; the fields are
/// parsed with room for one per CRLF-ended line, so lines split by bare LFs that make
/// more fields than that are refused; and a bare LF where a field would start ends the
/// fields early, the rest of the section being dropped.
fn trailers(section: &[u8]) -> Result<HeaderMap, WireError> {
    let body = &section[..section.len() - 2];
    let mut lines = 0;
    for (at, _) in body.iter().enumerate().filter(|(_, &b)| b == b'\r') {
        if body.get(at + 1) != Some(&b'\n') {
            return Err(WireError::Chunk);
        }
        lines += 1;
    }
    if lines > MAX_TRAILERS {
        return Err(WireError::Chunk);
    }
    let mut fields = [httparse::EMPTY_HEADER; MAX_TRAILERS];
    let parsed = match httparse::parse_headers(section, &mut fields[..lines]) {
        Ok(httparse::Status::Complete((_, parsed))) => parsed,
        _ => return Err(WireError::Chunk),
    };
    let mut map = HeaderMap::with_capacity(parsed.len());
    for field in parsed {
        let name = field_name(field.name.as_bytes()).ok_or(WireError::Chunk)?;
        if !allowed_in_trailer(&name) {
            continue;
        }
        let value = HeaderValue::from_bytes(field.value).map_err(|_| WireError::Chunk)?;
        map.append(name, value);
    }
    Ok(map)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(text: &str) -> Head {
        let mut buf = BytesMut::from(text);
        let head = parse_head(&mut buf).unwrap().unwrap();
        assert!(buf.is_empty(), "the head is split off");
        head
    }

    fn decode_all(framing: Framing, wire: &[u8], step: usize) -> Result<Vec<u8>, WireError> {
        let mut d = Decoder::new(framing);
        let mut buf = BytesMut::new();
        let mut body = Vec::new();
        let mut fed = 0;
        loop {
            match d.decode(&mut buf)? {
                Decoded::Data(b) => body.extend_from_slice(&b),
                Decoded::Trailers(_) | Decoded::Done => return Ok(body),
                Decoded::More if fed == wire.len() => {
                    d.eof()?;
                    return Ok(body);
                }
                Decoded::More => {
                    let next = (fed + step).min(wire.len());
                    buf.extend_from_slice(&wire[fed..next]);
                    fed = next;
                }
            }
        }
    }

    #[test]
    fn request_heads_carry_their_own_framing() {
        let mut headers = HeaderMap::new();
        headers.insert(header::HOST, "up:8080".parse().unwrap());
        headers.insert(header::CONTENT_LENGTH, "999".parse().unwrap());
        headers.append("x-many", "1".parse().unwrap());
        headers.append("x-many", "2".parse().unwrap());
        let mut out = BytesMut::new();
        encode_head(
            &mut out,
            &Method::POST,
            "/a?b=c",
            headers.iter(),
            RequestFraming::Length(5),
        );
        assert_eq!(
            &out[..],
            b"POST /a?b=c HTTP/1.1\r\nhost: up:8080\r\nx-many: 1\r\nx-many: 2\r\ncontent-length: 5\r\n\r\n"
        );
        let mut out = BytesMut::new();
        encode_head(
            &mut out,
            &Method::GET,
            "/",
            HeaderMap::new().iter(),
            RequestFraming::None,
        );
        assert_eq!(&out[..], b"GET / HTTP/1.1\r\n\r\n");
    }

    #[test]
    fn empty_bodies_are_announced_only_where_a_body_is_usual() {
        assert_eq!(
            RequestFraming::of(&Method::GET, true, Some(0)),
            RequestFraming::None
        );
        assert_eq!(
            RequestFraming::of(&Method::POST, true, Some(0)),
            RequestFraming::Length(0)
        );
        assert_eq!(
            RequestFraming::of(&Method::PUT, false, None),
            RequestFraming::Chunked
        );
        assert_eq!(
            RequestFraming::of(&Method::PUT, false, Some(7)),
            RequestFraming::Length(7)
        );
    }

    #[test]
    fn response_heads_parse_whole_or_wait_for_more() {
        let mut buf = BytesMut::from("HTTP/1.1 200 OK\r\nContent-Len");
        assert!(parse_head(&mut buf).unwrap().is_none());
        buf.extend_from_slice(b"gth: 3\r\nX-A: 1\r\nX-A: 2\r\n\r\nabcNEXT");
        let h = parse_head(&mut buf).unwrap().unwrap();
        assert_eq!(h.status, StatusCode::OK);
        assert_eq!(h.headers["content-length"], "3");
        assert_eq!(h.headers.get_all("x-a").iter().count(), 2);
        assert_eq!(&buf[..], b"abcNEXT", "the body stays in the buffer");
        let h = head("HTTP/1.0 404 Not Found\r\n\r\n");
        assert_eq!(
            (h.status, h.version),
            (StatusCode::NOT_FOUND, Version::HTTP_10)
        );
    }

    #[test]
    fn connection_fields_are_read_and_left_out() {
        let h = head(
            "HTTP/1.1 200 OK\r\nConnection: keep-alive, X-Private\r\nX-Private: 1\r\n\
             Keep-Alive: timeout=5\r\nTransfer-Encoding: chunked\r\nTrailer: x-t\r\n\
             Proxy-Authenticate: Basic\r\nX-Kept: 1\r\nContent-Length: 9\r\n\r\n",
        );
        let names: Vec<&str> = h.headers.keys().map(|n| n.as_str()).collect();
        assert_eq!(names, ["x-kept", "content-length"]);
        assert_eq!(h.conn.transfer_encoding, Some(true));
        assert_eq!(h.conn.content_length, Ok(Some(9)));
        assert!(!h.conn.close);
        let h = head("HTTP/1.1 200 OK\r\nconnection: close\r\n\r\n");
        assert!(h.conn.close && h.headers.is_empty());
        // Switching protocols: the client needs them to take the connection over.
        let h = head(
            "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
        );
        assert_eq!(h.headers["upgrade"], "websocket");
        assert_eq!(h.headers["connection"], "Upgrade");
    }

    #[test]
    fn bad_response_heads_are_errors() {
        for bad in [
            "HTTP/1.1 abc OK\r\n\r\n",
            "HTTP/9.9 200 OK\r\n\r\n",
            "HTTP/1.1 200 OK\r\nBad Name: x\r\n\r\n",
            "HTTP/1.1 099 Low\r\n\r\n",
        ] {
            assert!(parse_head(&mut BytesMut::from(bad)).is_err(), "{bad:?}");
        }
        let mut huge = BytesMut::from("HTTP/1.1 200 OK\r\n");
        huge.extend_from_slice(&vec![b'a'; MAX_HEAD]);
        assert_eq!(parse_head(&mut huge).unwrap_err(), WireError::HeadTooLarge);
    }

    #[test]
    fn framing_follows_rfc_9112() {
        let framing = |method: Method, text: &str| {
            let h = head(text);
            response_framing(&method, &h)
        };
        let ok = |t: &str| framing(Method::GET, t).unwrap();
        assert_eq!(
            ok("HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n"),
            Framing::Length(5)
        );
        assert_eq!(
            ok("HTTP/1.1 200 OK\r\ncontent-length: 5, 5\r\n\r\n"),
            Framing::Length(5)
        );
        assert_eq!(
            ok("HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"),
            Framing::Empty
        );
        assert_eq!(ok("HTTP/1.1 204 No Content\r\n\r\n"), Framing::Empty);
        assert_eq!(
            ok("HTTP/1.1 304 Not Modified\r\ncontent-length: 9\r\n\r\n"),
            Framing::Empty
        );
        assert_eq!(
            ok("HTTP/1.1 200 OK\r\ntransfer-encoding: gzip, chunked\r\ncontent-length: 9\r\n\r\n"),
            Framing::Chunked
        );
        assert_eq!(
            ok("HTTP/1.1 200 OK\r\ntransfer-encoding: gzip\r\n\r\n"),
            Framing::Close
        );
        assert_eq!(ok("HTTP/1.1 200 OK\r\n\r\n"), Framing::Close);
        // The last element decides, an empty one too; a value of other bytes is not chunked.
        assert_eq!(
            ok("HTTP/1.1 200 OK\r\ntransfer-encoding: chunked,\r\n\r\n"),
            Framing::Close
        );
        assert_eq!(
            ok("HTTP/1.1 200 OK\r\ntransfer-encoding: x\u{e9}, chunked\r\n\r\n"),
            Framing::Close
        );
        assert_eq!(
            framing(Method::HEAD, "HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n").unwrap(),
            Framing::Empty
        );
        for bad in ["5, 6", "-1", "five", "+5", ""] {
            let text = format!("HTTP/1.1 200 OK\r\ncontent-length: {bad}\r\n\r\n");
            assert_eq!(
                framing(Method::GET, &text),
                Err(WireError::ContentLength),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn only_clean_http_11_connections_are_reused() {
        let reuse = |text: &str| {
            let h = head(text);
            let f = response_framing(&Method::GET, &h).unwrap();
            reusable(&h, f)
        };
        assert!(reuse("HTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\n"));
        assert!(reuse(
            "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
        ));
        assert!(!reuse(
            "HTTP/1.1 200 OK\r\nconnection: keep-alive, close\r\ncontent-length: 1\r\n\r\n"
        ));
        assert!(!reuse("HTTP/1.0 200 OK\r\ncontent-length: 1\r\n\r\n"));
        assert!(!reuse("HTTP/1.1 200 OK\r\n\r\n"));
        assert!(!reuse(
            "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ncontent-length: 1\r\n\r\n"
        ));
    }

    #[test]
    fn bodies_decode_whatever_the_read_sizes() {
        let chunked = b"5;ext=1\r\nhello\r\n1\r\n \r\n5\r\nworld\r\n0\r\nx-t: 1\r\n\r\n";
        for step in [1, 2, 3, 7, 100] {
            assert_eq!(
                decode_all(Framing::Chunked, chunked, step).unwrap(),
                b"hello world"
            );
            assert_eq!(
                decode_all(Framing::Length(5), b"hello", step).unwrap(),
                b"hello"
            );
            assert_eq!(
                decode_all(Framing::Close, b"to the end", step).unwrap(),
                b"to the end"
            );
        }
        assert_eq!(decode_all(Framing::Empty, b"", 1).unwrap(), b"");
    }

    #[test]
    fn trailers_are_kept_without_the_fields_a_trailer_may_not_carry() {
        let wire = b"3\r\nabc\r\n0\r\nx-checksum: 9\r\nContent-Length: 3\r\nconnection: close\r\nx-checksum: 10\r\n\r\nHTTP/1.1";
        for step in [1, 5, 100] {
            let mut d = Decoder::new(Framing::Chunked);
            let mut buf = BytesMut::new();
            let mut fed = 0;
            let trailers = loop {
                match d.decode(&mut buf).unwrap() {
                    Decoded::Trailers(t) => break t,
                    Decoded::Data(_) => {}
                    Decoded::Done => panic!("ended without its trailers"),
                    Decoded::More => {
                        let next = (fed + step).min(wire.len());
                        assert!(next > fed, "asked for more than the wire holds");
                        buf.extend_from_slice(&wire[fed..next]);
                        fed = next;
                    }
                }
            };
            let values: Vec<_> = trailers.get_all("x-checksum").iter().collect();
            assert_eq!(values, ["9", "10"]);
            assert_eq!(trailers.len(), 2, "{trailers:?}");
            assert!(d.is_done());
            // What follows the body is left for the next answer.
            assert!(b"HTTP/1.1".starts_with(&buf[..]), "{buf:?}");
            assert_eq!(d.decode(&mut buf).unwrap(), Decoded::Done);
        }
        let bad = b"0\r\nx bad: 1\r\n\r\n";
        assert_eq!(
            decode_all(Framing::Chunked, bad, 100),
            Err(WireError::Chunk)
        );
    }

    #[test]
    fn a_trailer_section_is_read_as_hyper_reads_it() {
        let body = |wire: &[u8]| decode_all(Framing::Chunked, wire, 100);
        // A bare LF where a field would start ends the fields; the section still runs
        // to its CRLF CRLF.
        assert_eq!(body(b"0\r\n\nx-a: 1\r\n\r\n"), Ok(Vec::new()));
        // One field per CRLF-ended line: two fields on one line are refused.
        assert_eq!(body(b"0\r\nx-a: 1\nx-b: 2\r\n\r\n"), Err(WireError::Chunk));
        assert_eq!(body(b"0\r\nx-a: 1\r\nx-b: 2\r\n\r\n"), Ok(Vec::new()));
        // A CR must start a CRLF.
        assert_eq!(
            body(b"0\r\nx-a: 1\r\r\nx-b: 2\r\n\r\n"),
            Err(WireError::Chunk)
        );
        // A section as long as the limit is refused, whether it has ended or not.
        let mut endless = b"0\r\nx-a: ".to_vec();
        endless.extend(std::iter::repeat_n(b'a', MAX_TRAILER_SECTION));
        assert_eq!(body(&endless), Err(WireError::Chunk));
        endless.extend_from_slice(b"\r\n\r\n");
        assert_eq!(body(&endless), Err(WireError::Chunk));
        for step in [7, endless.len()] {
            assert_eq!(
                decode_all(Framing::Chunked, &endless, step),
                Err(WireError::Chunk)
            );
        }
    }

    #[test]
    fn a_length_body_stops_at_its_length() {
        let mut d = Decoder::new(Framing::Length(3));
        let mut buf = BytesMut::from("abcHTTP/1.1");
        assert_eq!(
            d.decode(&mut buf).unwrap(),
            Decoded::Data(Bytes::from("abc"))
        );
        assert!(d.is_done());
        assert_eq!(&buf[..], b"HTTP/1.1");
    }

    #[test]
    fn chunk_size_lines_are_read_as_hyper_reads_them() {
        let body = |wire: &[u8]| decode_all(Framing::Chunked, wire, 3);
        // Leading zeros are no limit, only the value is.
        assert_eq!(
            body(b"00000000000000000005\r\nhello\r\n0\r\n\r\n"),
            Ok(b"hello".to_vec())
        );
        assert_eq!(body(b"10000000000000000\r\n"), Err(WireError::Chunk));
        // Spaces before an extension; none between digits.
        assert_eq!(
            body(b"5 \t;a=b\r\nhello\r\n0\r\n\r\n"),
            Ok(b"hello".to_vec())
        );
        assert_eq!(body(b"5 5\r\n"), Err(WireError::Chunk));
        // A bare LF ends nothing: refused in an extension and after the size.
        assert_eq!(body(b"5;a\nb\r\nhello\r\n0\r\n\r\n"), Err(WireError::Chunk));
        assert_eq!(body(b"5\nhello\r\n0\r\n\r\n"), Err(WireError::Chunk));
        // An extension is held to 16 KiB.
        let mut long = b"5;".to_vec();
        long.extend(std::iter::repeat_n(b'x', MAX_CHUNK_EXTENSION));
        long.extend_from_slice(b"\r\nhello\r\n0\r\n\r\n");
        assert_eq!(body(&long), Err(WireError::Chunk));
    }

    #[test]
    fn truncated_and_malformed_bodies_are_errors() {
        assert_eq!(
            decode_all(Framing::Length(10), b"short", 100),
            Err(WireError::Truncated(5))
        );
        assert_eq!(
            decode_all(Framing::Chunked, b"5\r\nhel", 100),
            Err(WireError::TruncatedChunked)
        );
        assert_eq!(
            decode_all(Framing::Chunked, b"zz\r\n", 100),
            Err(WireError::Chunk)
        );
        assert_eq!(
            decode_all(Framing::Chunked, b"2\r\nabXX", 100),
            Err(WireError::Chunk)
        );
        let endless = vec![b'1'; MAX_CHUNK_LINE + 10];
        assert_eq!(
            decode_all(Framing::Chunked, &endless, 100_000),
            Err(WireError::Chunk)
        );
    }
}
