//! `archive`: joins every message of a batch into one message in `format`: `binary` (a
//! count and length-prefixed parts, readable by `unarchive`), `concatenate`, `lines`,
//! `json_array`, `tar` or `zip`. For tar and zip each message is a file named by `path`,
//! rendered per message. The result carries the first message's metadata. It stays in
//! the batch's transaction, so the input is acknowledged once the archive is.

use std::io::Write;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;

use super::BuildProcessor;
use crate::component::registry::Spec;
use crate::component::{BuildContext, BuildError, ComponentSpec, Example, Kind, Processor};
use crate::config::Interp;
use crate::message::{Batch, Message};
use crate::value::Value;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ArchiveFormat {
    Binary,
    Concatenate,
    JsonArray,
    Lines,
    Tar,
    Zip,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ArchiveConfig {
    /// binary, concatenate, json_array, lines, tar or zip.
    pub format: ArchiveFormat,
    /// The file name of each message in a tar or zip archive; may use `${! ... }`.
    #[serde(default = "default_path")]
    pub path: Interp,
}

fn default_path() -> Interp {
    Interp::parse(r#"${!count("files")}-${!timestamp_unix_nano()}.txt"#)
        .expect("the default path parses")
}

impl Spec for ArchiveConfig {
    const SPEC: ComponentSpec = ComponentSpec {
        name: "archive",
        kind: Kind::Processor,
        summary: "Joins the messages of a batch into one archive message.",
        examples: &[Example {
            title: "A tar file per batch of 100",
            yaml: "input:\n  generate: {mapping: 'root.id = uuid_v4()', interval: 10ms, batch_size: 100}\npipeline:\n  processors:\n    - archive:\n        format: tar\n        path: '${! batch_index() }.json'\n    - compress: {algorithm: gzip}\noutput:\n  stdout: {}\n",
        }],
    };
}

impl BuildProcessor for ArchiveConfig {
    fn build(&self, _cx: &BuildContext) -> Result<Box<dyn Processor>, BuildError> {
        Ok(Box::new(Archive(self.clone())))
    }
}

pub struct Archive(ArchiveConfig);

/// Writes `parts` in the binary batch format: a big-endian u32 count, then each part as
/// a big-endian u32 length and its bytes.
pub fn encode_binary<'a>(
    parts: impl ExactSizeIterator<Item = &'a [u8]>,
) -> Result<Vec<u8>, String> {
    let len32 =
        |n: usize| u32::try_from(n).map_err(|_| format!("{n} is too large for the binary format"));
    let mut out = Vec::new();
    out.extend_from_slice(&len32(parts.len())?.to_be_bytes());
    for p in parts {
        out.extend_from_slice(&len32(p.len())?.to_be_bytes());
        out.extend_from_slice(p);
    }
    Ok(out)
}

/// Reads the binary batch format written by [`encode_binary`].
pub fn decode_binary(data: &[u8]) -> Result<Vec<&[u8]>, String> {
    let mut rest = data;
    let take_u32 = |rest: &mut &[u8], what: &str| -> Result<usize, String> {
        let (head, tail) = rest
            .split_first_chunk::<4>()
            .ok_or_else(|| format!("binary archive cut short reading {what}"))?;
        *rest = tail;
        Ok(u32::from_be_bytes(*head) as usize)
    };
    let count = take_u32(&mut rest, "the part count")?;
    // Never trust the count for an allocation: each part takes at least 4 bytes.
    let mut parts = Vec::with_capacity(count.min(rest.len() / 4));
    for i in 0..count {
        let len = take_u32(&mut rest, &format!("the length of part {i}"))?;
        if rest.len() < len {
            return Err(format!(
                "binary archive part {i} says {len} bytes but {} remain",
                rest.len()
            ));
        }
        let (part, tail) = rest.split_at(len);
        parts.push(part);
        rest = tail;
    }
    if !rest.is_empty() {
        return Err(format!(
            "binary archive has {} bytes after its {count} parts",
            rest.len()
        ));
    }
    Ok(parts)
}

impl Archive {
    fn paths(&self, batch: &Batch) -> Result<Vec<String>, String> {
        (0..batch.len())
            .map(|i| {
                self.0
                    .path
                    .render(batch, i)
                    .map_err(|e| format!("path of message {i}: {e}"))
            })
            .collect()
    }

    fn archive(&self, batch: &Batch) -> Result<Message, String> {
        let payloads = || batch.iter().map(|m| &m.payload()[..]);
        let io = |e: std::io::Error| e.to_string();
        Ok(match self.0.format {
            ArchiveFormat::Binary => Message::new(encode_binary(payloads())?),
            ArchiveFormat::Concatenate => Message::new(payloads().collect::<Vec<_>>().concat()),
            ArchiveFormat::Lines => Message::new(payloads().collect::<Vec<_>>().join(&b"\n"[..])),
            ArchiveFormat::JsonArray => {
                let items = batch
                    .iter()
                    .enumerate()
                    .map(|(i, m)| {
                        m.structured()
                            .cloned()
                            .map_err(|e| format!("message {i}: {e}"))
                    })
                    .collect::<Result<Vec<Value>, String>>()?;
                Message::from_value(Value::Array(items))
            }
            ArchiveFormat::Tar => {
                let mut tar = tar::Builder::new(Vec::new());
                let mtime = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_secs())
                    .unwrap_or(0);
                for (path, data) in self.paths(batch)?.into_iter().zip(payloads()) {
                    let mut header = tar::Header::new_gnu();
                    header.set_size(data.len() as u64);
                    header.set_mode(0o644);
                    header.set_mtime(mtime);
                    tar.append_data(&mut header, &path, data)
                        .map_err(|e| format!("tar entry `{path}`: {e}"))?;
                }
                Message::new(tar.into_inner().map_err(io)?)
            }
            ArchiveFormat::Zip => {
                let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
                let options = zip::write::SimpleFileOptions::default()
                    .compression_method(zip::CompressionMethod::Deflated);
                for (path, data) in self.paths(batch)?.into_iter().zip(payloads()) {
                    zip.start_file(path.as_str(), options)
                        .map_err(|e| format!("zip entry `{path}`: {e}"))?;
                    zip.write_all(data).map_err(io)?;
                }
                Message::new(zip.finish().map_err(|e| e.to_string())?.into_inner())
            }
        })
    }
}

#[async_trait]
impl Processor for Archive {
    async fn process(&self, mut batch: Batch) -> Vec<Batch> {
        if batch.is_empty() {
            return Vec::new();
        }
        match self.archive(&batch) {
            Ok(mut joined) => {
                joined.share_metadata(&batch[0]);
                vec![vec![joined]]
            }
            // Nothing is lost: every message passes on unchanged, marked.
            Err(e) => {
                for m in &mut batch {
                    m.set_error(format!("archive: {e}"));
                }
                vec![batch]
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::processor::chain::test_support::{batch, build, texts};

    async fn run(yaml: &str, input: &[&str]) -> Vec<Batch> {
        build::<ArchiveConfig>(yaml).process(batch(input)).await
    }

    #[tokio::test]
    async fn text_formats_join_into_one_message() {
        let out = run("{format: lines}", &["a", "b", "c"]).await;
        assert_eq!(out.len(), 1);
        assert_eq!(texts(&out[0]), vec!["a\nb\nc"]);
        let out = run("{format: concatenate}", &["a", "b"]).await;
        assert_eq!(texts(&out[0]), vec!["ab"]);
        let out = run("{format: json_array}", &[r#"{"a":1}"#, "2"]).await;
        assert_eq!(texts(&out[0]), vec![r#"[{"a":1},2]"#]);
    }

    #[tokio::test]
    async fn binary_is_count_then_length_prefixed_parts() {
        let out = run("{format: binary}", &["ab", "", "c"]).await;
        let want: Vec<u8> = [
            &[0, 0, 0, 3][..],
            &[0, 0, 0, 2],
            b"ab",
            &[0, 0, 0, 0],
            &[0, 0, 0, 1],
            b"c",
        ]
        .concat();
        assert_eq!(out[0][0].payload().as_ref(), &want[..]);
        assert_eq!(decode_binary(&want).unwrap(), vec![&b"ab"[..], b"", b"c"]);
        assert!(decode_binary(&want[..want.len() - 1]).is_err());
        assert!(decode_binary(&[0, 0]).is_err());
        assert!(decode_binary(&[255, 255, 255, 255]).is_err());
    }

    #[tokio::test]
    async fn tar_and_zip_hold_a_file_per_message() {
        let out = run(
            "{format: tar, path: 'f${! batch_index() }.txt'}",
            &["one", "two"],
        )
        .await;
        let data = out[0][0].payload().clone();
        let mut archive = tar::Archive::new(&data[..]);
        let mut files = Vec::new();
        for entry in archive.entries().unwrap() {
            let mut entry = entry.unwrap();
            let mut body = String::new();
            std::io::Read::read_to_string(&mut entry, &mut body).unwrap();
            files.push((entry.path().unwrap().display().to_string(), body));
        }
        assert_eq!(
            files,
            vec![
                ("f0.txt".into(), "one".into()),
                ("f1.txt".into(), "two".into())
            ]
        );

        let out = run(
            "{format: zip, path: 'z${! batch_index() }'}",
            &["one", "two"],
        )
        .await;
        let data = out[0][0].payload().clone();
        let mut zip = zip::ZipArchive::new(std::io::Cursor::new(&data[..])).unwrap();
        let mut second = zip.by_name("z1").unwrap();
        let mut body = String::new();
        std::io::Read::read_to_string(&mut second, &mut body).unwrap();
        assert_eq!(body, "two");
    }

    #[tokio::test]
    async fn keeps_the_first_metadata_and_marks_failures() {
        let p = build::<ArchiveConfig>("{format: lines}");
        let input = vec![
            Message::new("a").with_meta("k", "first"),
            Message::new("b").with_meta("k", "second"),
        ];
        let out = p.process(input).await;
        assert_eq!(out[0][0].meta_str("k").as_deref(), Some("first"));

        let out = run("{format: json_array}", &["{}", "not json"]).await;
        assert_eq!(texts(&out[0]), vec!["{}", "not json"]);
        let e = out[0][1].error().unwrap();
        assert!(e.contains("message 1"), "{e}");
    }

    #[test]
    fn unknown_format_is_refused() {
        let e = serde_yaml::from_str::<ArchiveConfig>("{format: rar}").unwrap_err();
        assert!(e.to_string().contains("rar"), "{e}");
    }
}
