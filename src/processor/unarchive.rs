//! `unarchive`: expands each message into the messages it holds, in its place in the
//! batch: `binary` (the format `archive` writes), `csv` (or `csv:X` for delimiter X;
//! a header row is required and each row becomes an object), `json_documents`,
//! `json_array`, `json_map` (each value, with its key as `archive_key` metadata),
//! `lines`, `tar` and `zip` (each file, with its name as `archive_filename`). New
//! messages carry the metadata of the one they came from. A message that does not
//! unarchive stays as it was, marked with the error.

use std::io::Read;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;

use super::archive::decode_binary;
use super::chain::non_empty;
use super::BuildProcessor;
use crate::component::registry::Spec;
use crate::component::{BuildContext, BuildError, ComponentSpec, Example, Kind, Processor};
use crate::message::{Batch, Message};
use crate::value::{Object, Value};

/// What one archive may expand to in total, so a small hostile archive cannot exhaust
/// memory.
const MAX_EXPANDED: u64 = 256 << 20;

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UnarchiveConfig {
    /// binary, csv, csv:X (X the delimiter), json_documents, json_array, json_map,
    /// lines, tar or zip.
    pub format: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Binary,
    Csv(u8),
    JsonDocuments,
    JsonArray,
    JsonMap,
    Lines,
    Tar,
    Zip,
}

const FORMATS: &str = "binary, csv, csv:X, json_documents, json_array, json_map, lines, tar, zip";

impl Format {
    fn parse(s: &str) -> Result<Format, String> {
        Ok(match s {
            "binary" => Format::Binary,
            "csv" => Format::Csv(b','),
            "json_documents" => Format::JsonDocuments,
            "json_array" => Format::JsonArray,
            "json_map" => Format::JsonMap,
            "lines" => Format::Lines,
            "tar" => Format::Tar,
            "zip" => Format::Zip,
            other => match other.strip_prefix("csv:") {
                Some(d) if d.len() == 1 => Format::Csv(d.as_bytes()[0]),
                Some(d) => {
                    return Err(format!(
                        "the csv delimiter must be a single one-byte character, got `{d}`"
                    ))
                }
                None => {
                    return Err(format!(
                        "unknown format `{other}`, expected one of {FORMATS}"
                    ))
                }
            },
        })
    }
}

impl Spec for UnarchiveConfig {
    const SPEC: ComponentSpec = ComponentSpec {
        name: "unarchive",
        kind: Kind::Processor,
        summary: "Expands each archive message into the messages it holds.",
        examples: &[Example {
            title: "A message per element of a JSON array",
            yaml: "input:\n  stdin: {}\npipeline:\n  processors:\n    - unarchive: {format: json_array}\noutput:\n  stdout: {}\n",
        }],
    };
}

impl BuildProcessor for UnarchiveConfig {
    fn build(&self, cx: &BuildContext) -> Result<Box<dyn Processor>, BuildError> {
        let format = Format::parse(&self.format).map_err(|e| cx.error(e))?;
        Ok(Box::new(Unarchive(format)))
    }
}

pub struct Unarchive(Format);

/// A message taken out of an archive, with a metadata key and value to set on it.
type Part = (Message, Option<(&'static str, String)>);

/// Reads `r` to its end, counting against the budget of the whole archive.
fn read_capped(r: impl Read, budget: &mut u64, name: &str) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    r.take(*budget + 1)
        .read_to_end(&mut out)
        .map_err(|e| format!("reading `{name}`: {e}"))?;
    if out.len() as u64 > *budget {
        return Err(format!(
            "the archive expands to more than {MAX_EXPANDED} bytes"
        ));
    }
    *budget -= out.len() as u64;
    Ok(out)
}

/// A message holding `v` as a JSON document: a string element stays quoted, as in the
/// archive, rather than becoming bare text.
fn json_message(v: Value) -> Message {
    match v {
        Value::String(_) => Message::new(v.to_json()),
        other => Message::from_value(other),
    }
}

fn describe(v: &Value) -> &'static str {
    v.type_name()
}

impl Unarchive {
    /// The messages `data` holds, each with an optional (metadata key, value) to set.
    fn expand(&self, data: &[u8]) -> Result<Vec<Part>, String> {
        let plain = |m: Message| (m, None);
        Ok(match self.0 {
            Format::Binary => decode_binary(data)?
                .into_iter()
                .map(|p| plain(Message::new(bytes::Bytes::copy_from_slice(p))))
                .collect(),
            // As Benthos does: every newline separates, so a final newline gives
            // a last empty message and a `\r` before it stays.
            Format::Lines => data
                .split(|&b| b == b'\n')
                .map(|l| plain(Message::new(bytes::Bytes::copy_from_slice(l))))
                .collect(),
            Format::JsonDocuments => serde_json::Deserializer::from_slice(data)
                .into_iter::<Value>()
                .enumerate()
                .map(|(i, v)| {
                    v.map(|v| plain(json_message(v)))
                        .map_err(|e| format!("JSON document {i}: {e}"))
                })
                .collect::<Result<_, _>>()?,
            Format::JsonArray => match Value::from_json(data).map_err(|e| e.to_string())? {
                Value::Array(items) => items.into_iter().map(|v| plain(json_message(v))).collect(),
                other => return Err(format!("expected a JSON array, got {}", describe(&other))),
            },
            Format::JsonMap => match Value::from_json(data).map_err(|e| e.to_string())? {
                Value::Object(map) => map
                    .into_iter()
                    .map(|(k, v)| (json_message(v), Some(("archive_key", k))))
                    .collect(),
                other => return Err(format!("expected a JSON object, got {}", describe(&other))),
            },
            Format::Csv(delimiter) => {
                let mut reader = csv::ReaderBuilder::new()
                    .delimiter(delimiter)
                    .has_headers(true)
                    .from_reader(data);
                let headers = reader
                    .headers()
                    .map_err(|e| format!("csv header: {e}"))?
                    .clone();
                let mut out = Vec::new();
                for row in reader.records() {
                    let row = row.map_err(|e| format!("csv: {e}"))?;
                    let obj: Object = headers
                        .iter()
                        .zip(row.iter())
                        .map(|(k, v)| (k.to_owned(), Value::String(v.to_owned())))
                        .collect();
                    out.push(plain(Message::from_value(Value::Object(obj))));
                }
                out
            }
            Format::Tar => {
                let mut budget = MAX_EXPANDED;
                let mut archive = tar::Archive::new(data);
                let mut out = Vec::new();
                for entry in archive.entries().map_err(|e| format!("tar: {e}"))? {
                    let entry = entry.map_err(|e| format!("tar: {e}"))?;
                    if !entry.header().entry_type().is_file() {
                        continue;
                    }
                    let name = entry
                        .path()
                        .map_err(|e| format!("tar entry name: {e}"))?
                        .to_string_lossy()
                        .into_owned();
                    let body = read_capped(entry, &mut budget, &name)?;
                    out.push((Message::new(body), Some(("archive_filename", name))));
                }
                out
            }
            Format::Zip => {
                let mut budget = MAX_EXPANDED;
                let mut archive = zip::ZipArchive::new(std::io::Cursor::new(data))
                    .map_err(|e| format!("zip: {e}"))?;
                let mut out = Vec::new();
                for i in 0..archive.len() {
                    let file = archive.by_index(i).map_err(|e| format!("zip: {e}"))?;
                    if file.is_dir() {
                        continue;
                    }
                    let name = file.name().to_owned();
                    let body = read_capped(file, &mut budget, &name)?;
                    out.push((Message::new(body), Some(("archive_filename", name))));
                }
                out
            }
        })
    }
}

#[async_trait]
impl Processor for Unarchive {
    async fn process(&self, batch: Batch) -> Vec<Batch> {
        let mut out = Vec::with_capacity(batch.len());
        for mut msg in batch {
            match self.expand(msg.payload()) {
                Ok(parts) => {
                    for (mut part, meta) in parts {
                        part.share_metadata(&msg);
                        if let Some((key, value)) = meta {
                            part.set_meta(key, value);
                        }
                        out.push(part);
                    }
                }
                Err(e) => {
                    msg.set_error(format!("unarchive: {e}"));
                    out.push(msg);
                }
            }
        }
        non_empty(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::processor::archive::ArchiveConfig;
    use crate::processor::chain::test_support::{batch, build, build_error, texts};

    async fn run(format: &str, input: &[&str]) -> Batch {
        let p = build::<UnarchiveConfig>(&format!("{{format: '{format}'}}"));
        p.process(batch(input))
            .await
            .into_iter()
            .flatten()
            .collect()
    }

    #[tokio::test]
    async fn json_formats_expand_in_place() {
        let out = run("json_array", &["first", r#"[1,{"a":2},"s"]"#, "last"]).await;
        assert_eq!(
            texts(&out),
            vec!["first", "1", r#"{"a":2}"#, r#""s""#, "last"]
        );
        assert!(out[0].error().is_some(), "`first` is not an array");

        let out = run("json_documents", &["{\"a\":1} {\"b\":2}\n[3]"]).await;
        assert_eq!(texts(&out), vec![r#"{"a":1}"#, r#"{"b":2}"#, "[3]"]);

        let out = run("json_map", &[r#"{"x":1,"y":[2]}"#]).await;
        assert_eq!(texts(&out), vec!["1", "[2]"]);
        assert_eq!(out[1].meta_str("archive_key").as_deref(), Some("y"));
    }

    #[tokio::test]
    async fn lines_and_csv() {
        let out = run("lines", &["a\r\n\nb\n"]).await;
        assert_eq!(texts(&out), vec!["a\r", "", "b", ""]);
        assert_eq!(texts(&run("lines", &["one"]).await), vec!["one"]);

        let out = run("csv", &["id,name\n1,ann\n2,bob\n"]).await;
        assert_eq!(
            texts(&out),
            vec![r#"{"id":"1","name":"ann"}"#, r#"{"id":"2","name":"bob"}"#]
        );
        let out = run("csv:\t", &["id\tname\n1\tann\n"]).await;
        assert_eq!(texts(&out), vec![r#"{"id":"1","name":"ann"}"#]);
        let out = run("csv", &["id,name\n1,ann,extra\n"]).await;
        assert!(out[0].error().is_some());
    }

    #[tokio::test]
    async fn archive_then_unarchive_round_trips() {
        for format in ["binary", "tar", "zip"] {
            let packed = build::<ArchiveConfig>(&format!(
                "{{format: {format}, path: 'f${{! batch_index() }}'}}"
            ))
            .process(vec![
                Message::new("one").with_meta("source", "s"),
                Message::new("two"),
            ])
            .await;
            let p = build::<UnarchiveConfig>(&format!("{{format: {format}}}"));
            let out = p.process(packed[0].clone()).await;
            assert_eq!(texts(&out[0]), vec!["one", "two"], "{format}");
            assert_eq!(
                out[0][1].meta_str("source").as_deref(),
                Some("s"),
                "{format}"
            );
            if format != "binary" {
                assert_eq!(
                    out[0][1].meta_str("archive_filename").as_deref(),
                    Some("f1"),
                    "{format}"
                );
            }
        }
    }

    #[tokio::test]
    async fn garbage_is_marked_not_dropped() {
        for format in ["binary", "tar", "zip", "json_array", "json_map"] {
            let out = run(format, &["definitely not an archive of any kind"]).await;
            assert_eq!(
                texts(&out),
                vec!["definitely not an archive of any kind"],
                "{format}"
            );
            assert!(out[0].error().is_some(), "{format}");
        }
    }

    #[test]
    fn bad_formats_are_refused() {
        let e = build_error::<UnarchiveConfig>("{format: rar}");
        assert!(e.contains("rar") && e.contains("json_map"), "{e}");
        let e = build_error::<UnarchiveConfig>("{format: 'csv:;;'}");
        assert!(e.contains("delimiter"), "{e}");
    }
}
