//! How byte streams split into messages (inputs) and messages join into byte streams
//! (outputs): `lines`, `all-bytes`, or `delim:X` with a custom delimiter.

use std::fmt;
use std::str::FromStr;

use bytes::{Bytes, BytesMut};
use schemars::JsonSchema;
use serde::Deserialize;
use tokio::io::{AsyncRead, AsyncReadExt};

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Codec {
    /// One message per line (`\n`, a trailing `\r` is removed).
    #[default]
    Lines,
    /// The whole stream is one message.
    AllBytes,
    /// Messages separated by a custom delimiter.
    Delim(Vec<u8>),
}

#[derive(Debug, Clone, thiserror::Error)]
#[error("unknown codec `{0}`: expected `lines`, `all-bytes` or `delim:X`")]
pub struct CodecError(String);

impl FromStr for Codec {
    type Err = CodecError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "lines" => Ok(Codec::Lines),
            "all-bytes" | "all_bytes" => Ok(Codec::AllBytes),
            _ => match s.strip_prefix("delim:") {
                Some(d) if !d.is_empty() => Ok(Codec::Delim(unescape(d).into_bytes())),
                _ => Err(CodecError(s.to_owned())),
            },
        }
    }
}

/// `\n`, `\t` and `\r` written in YAML as two characters mean the control character.
fn unescape(s: &str) -> String {
    s.replace("\\n", "\n")
        .replace("\\t", "\t")
        .replace("\\r", "\r")
}

impl fmt::Display for Codec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Codec::Lines => f.write_str("lines"),
            Codec::AllBytes => f.write_str("all-bytes"),
            Codec::Delim(d) => write!(f, "delim:{}", String::from_utf8_lossy(d)),
        }
    }
}

impl<'de> Deserialize<'de> for Codec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

impl JsonSchema for Codec {
    fn schema_name() -> String {
        "Codec".into()
    }
    fn json_schema(g: &mut schemars::gen::SchemaGenerator) -> schemars::schema::Schema {
        String::json_schema(g)
    }
}

impl Codec {
    /// The bytes written after each message by outputs.
    pub fn separator(&self) -> &[u8] {
        match self {
            Codec::Lines => b"\n",
            Codec::AllBytes => b"",
            Codec::Delim(d) => d,
        }
    }
}

/// Bytes asked of the reader at a time: large reads keep system calls per message low.
const READ_SIZE: usize = 64 * 1024;

/// Most messages handed over at once by [`Splitter::next_batch`].
pub const MAX_BATCH: usize = 4096;

/// Splits a byte stream into messages. Cancel safe: bytes read stay in the buffer.
pub struct Splitter<R> {
    reader: R,
    codec: Codec,
    buf: BytesMut,
    eof: bool,
    max_size: usize,
    /// After an oversized message: drop bytes up to the next delimiter.
    skipping: bool,
    /// An oversized message was split off while batching; `next` reports it.
    pending_error: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum SplitError {
    #[error("read failed: {0}")]
    Io(#[from] std::io::Error),
    #[error("a message exceeds the maximum size of {0} bytes")]
    TooLarge(usize),
}

impl<R: AsyncRead + Unpin> Splitter<R> {
    pub fn new(reader: R, codec: Codec, max_size: usize) -> Self {
        Splitter {
            reader,
            codec,
            buf: BytesMut::with_capacity(READ_SIZE),
            eof: false,
            max_size,
            skipping: false,
            pending_error: false,
        }
    }

    /// The next message, or `None` at the end of the stream.
    pub async fn next(&mut self) -> Result<Option<Bytes>, SplitError> {
        if std::mem::take(&mut self.pending_error) {
            return Err(SplitError::TooLarge(self.max_size));
        }
        loop {
            if let Some(msg) = self.split_one() {
                if std::mem::take(&mut self.skipping) {
                    // The tail of the oversized message.
                    continue;
                }
                if msg.len() > self.max_size {
                    return Err(SplitError::TooLarge(self.max_size));
                }
                return Ok(Some(msg));
            }
            if self.eof {
                if self.buf.is_empty() {
                    return Ok(None);
                }
                // The last message without a trailing delimiter.
                let rest = self.buf.split().freeze();
                return Ok(Some(self.trim(rest)));
            }
            if self.buf.len() > self.max_size && self.codec != Codec::AllBytes {
                self.buf.clear();
                if !std::mem::replace(&mut self.skipping, true) {
                    return Err(SplitError::TooLarge(self.max_size));
                }
            }
            self.buf.reserve(READ_SIZE);
            let n = self.reader.read_buf(&mut self.buf).await?;
            if n == 0 {
                self.eof = true;
            }
        }
    }

    /// Every message that is ready: waits for the first (as [`Splitter::next`]), then takes
    /// the complete messages already read, up to `max`, without waiting for more. `None` at
    /// the end of the stream. An error after some messages is returned by the next call.
    pub async fn next_batch(&mut self, max: usize) -> Result<Option<Vec<Bytes>>, SplitError> {
        let Some(first) = self.next().await? else {
            return Ok(None);
        };
        let mut batch = vec![first];
        while batch.len() < max.max(1) && !self.skipping {
            match self.split_one() {
                Some(msg) if msg.len() > self.max_size => {
                    // Reported when asked next, as `next` would have.
                    self.pending_error = true;
                    break;
                }
                Some(msg) => batch.push(msg),
                None => break,
            }
        }
        Ok(Some(batch))
    }

    fn split_one(&mut self) -> Option<Bytes> {
        let delim: &[u8] = match &self.codec {
            Codec::AllBytes => return None,
            Codec::Lines => b"\n",
            Codec::Delim(d) => d,
        };
        let pos = match delim {
            [byte] => memchr::memchr(*byte, &self.buf)?,
            _ => memchr::memmem::find(&self.buf, delim)?,
        };
        let msg = self.buf.split_to(pos).freeze();
        let _ = self.buf.split_to(delim.len());
        Some(self.trim(msg))
    }

    fn trim(&self, msg: Bytes) -> Bytes {
        if self.codec == Codec::Lines && msg.last() == Some(&b'\r') {
            msg.slice(..msg.len() - 1)
        } else {
            msg
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn split(codec: &str, input: &[u8]) -> Vec<String> {
        let mut s = Splitter::new(input, codec.parse().unwrap(), 1 << 20);
        let mut out = Vec::new();
        while let Some(m) = s.next().await.unwrap() {
            out.push(String::from_utf8(m.to_vec()).unwrap());
        }
        out
    }

    #[tokio::test]
    async fn lines_with_crlf_and_no_final_newline() {
        assert_eq!(
            split("lines", b"a\r\nb\n\nc").await,
            vec!["a", "b", "", "c"]
        );
    }

    #[tokio::test]
    async fn all_bytes_is_one_message() {
        assert_eq!(split("all-bytes", b"a\nb\n").await, vec!["a\nb\n"]);
    }

    #[tokio::test]
    async fn custom_delimiter() {
        assert_eq!(split("delim:||", b"x||y||z").await, vec!["x", "y", "z"]);
        assert_eq!(split("delim:\\t", b"x\ty").await, vec!["x", "y"]);
    }

    #[test]
    fn unknown_codec_is_an_error() {
        assert!("csv".parse::<Codec>().is_err());
        assert!("delim:".parse::<Codec>().is_err());
    }

    #[tokio::test]
    async fn a_batch_is_every_complete_message_already_read() {
        let data = b"a\nb\r\nc\nd";
        let mut s = Splitter::new(&data[..], Codec::Lines, 1 << 20);
        let batch = s.next_batch(MAX_BATCH).await.unwrap().unwrap();
        // "d" has no delimiter yet: it waits for the end of the stream.
        assert_eq!(batch, vec!["a", "b", "c"]);
        assert_eq!(s.next_batch(MAX_BATCH).await.unwrap().unwrap(), vec!["d"]);
        assert_eq!(s.next_batch(MAX_BATCH).await.unwrap(), None);
    }

    #[tokio::test]
    async fn a_batch_stops_at_max_and_before_an_oversized_message() {
        let mut s = Splitter::new(&b"a\nb\nc\n"[..], Codec::Lines, 1 << 20);
        assert_eq!(s.next_batch(2).await.unwrap().unwrap(), vec!["a", "b"]);
        assert_eq!(s.next_batch(2).await.unwrap().unwrap(), vec!["c"]);

        let mut data = b"ok\n".to_vec();
        data.extend_from_slice(&[b'x'; 100]);
        data.extend_from_slice(b"\nnext\n");
        let mut s = Splitter::new(&data[..], Codec::Lines, 10);
        assert_eq!(s.next_batch(MAX_BATCH).await.unwrap().unwrap(), vec!["ok"]);
        assert!(matches!(
            s.next_batch(MAX_BATCH).await,
            Err(SplitError::TooLarge(10))
        ));
        assert_eq!(
            s.next_batch(MAX_BATCH).await.unwrap().unwrap(),
            vec!["next"]
        );
    }

    #[tokio::test]
    async fn oversized_line_is_an_error() {
        let mut data = vec![b'x'; 100];
        data.extend_from_slice(b"\nok\n");
        let mut s = Splitter::new(&data[..], Codec::Lines, 10);
        assert!(matches!(s.next().await, Err(SplitError::TooLarge(10))));
        // The reader goes on with the next message.
        assert_eq!(&s.next().await.unwrap().unwrap()[..], b"ok");
    }
}
