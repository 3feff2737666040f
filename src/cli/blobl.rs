//! `sluice blobl`: runs a mapping over stdin, one message per line (or all of stdin as
//! one message), writing each result on its own line. Errors go to stderr and the run
//! goes on; the exit status is 1 when any message failed, and a mapping that does not
//! compile stops the run at once.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::sync::mpsc::SyncSender;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};

use crate::mapping::{Env, Mapping};
use crate::message::{Message, Metadata};
use crate::value::Value;

/// Arguments of `sluice blobl`; the CLI fills them (including from
/// `SLUICE_BLOBL_META` and `SLUICE_BLOBL_SINGLE_MESSAGE`).
#[derive(Debug, Clone, Default)]
pub struct BloblArgs {
    /// The mapping text.
    pub mapping: Option<String>,
    /// A file to read the mapping from instead.
    pub file: Option<PathBuf>,
    /// Input metadata as a JSON object.
    pub meta: Option<String>,
    /// Read all of stdin as one message.
    pub single: bool,
}

/// Bytes read from stdin at a time.
const CHUNK: usize = 64 * 1024;

/// A line without its line ending (`\n`, `\r\n`, or stray `\r`s before it).
fn trim_end(line: &[u8]) -> &[u8] {
    let end = line
        .iter()
        .rposition(|b| !matches!(b, b'\n' | b'\r'))
        .map_or(0, |i| i + 1);
    &line[..end]
}

/// A message of `payload` with the command's metadata.
fn message(payload: Bytes, meta: &Option<Arc<Metadata>>) -> Message {
    let msg = Message::new(payload);
    match meta {
        Some(meta) => msg.with_shared_metadata(meta.clone()),
        None => msg,
    }
}

/// Reads `input` in large chunks and sends the complete lines of each as one batch of
/// messages, parsed already when the mapping reads `this`. Returns the read error that
/// ended it, if one did; stops early when the receiver is gone.
fn read_lines(
    mut input: impl Read,
    tx: SyncSender<Vec<Message>>,
    meta: &Option<Arc<Metadata>>,
    parse: bool,
) -> Option<std::io::Error> {
    let mut buf = BytesMut::with_capacity(CHUNK);
    let mut chunk = vec![0u8; CHUNK];
    let send = |lines: Vec<Message>| tx.send(lines).is_ok();
    let to_message = |line: Bytes| {
        let msg = message(line, meta);
        if parse {
            // Cached in the message, error or value, for the mapping thread.
            let _ = msg.structured();
        }
        msg
    };
    loop {
        let n = match input.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Some(e),
        };
        buf.extend_from_slice(&chunk[..n]);
        if let Some(last) = memchr::memrchr(b'\n', &buf) {
            let complete = buf.split_to(last + 1).freeze();
            let lines = complete[..last]
                .split(|b| *b == b'\n')
                .map(|line| to_message(complete.slice_ref(trim_end(line))))
                .collect();
            if !send(lines) {
                return None;
            }
        }
    }
    if !buf.is_empty() {
        let rest = buf.freeze();
        send(vec![to_message(rest.slice_ref(trim_end(&rest)))]);
    }
    None
}

/// Runs the command and returns its exit status.
pub fn run(
    args: BloblArgs,
    mut stdin: impl Read + Send,
    mut stdout: impl Write,
    mut stderr: impl Write,
) -> i32 {
    let (src, env) = match (&args.mapping, &args.file) {
        (_, Some(path)) => match std::fs::read_to_string(path) {
            Ok(s) => {
                let dir = path.parent().map(PathBuf::from).unwrap_or_default();
                (s, Env::with_import_dir(dir))
            }
            Err(e) => {
                let _ = writeln!(
                    stderr,
                    "failed to read mapping file {}: {e}",
                    path.display()
                );
                return 1;
            }
        },
        (Some(m), None) => (
            m.clone(),
            Env::with_import_dir(std::env::current_dir().unwrap_or_default()),
        ),
        (None, None) => {
            let _ = writeln!(
                stderr,
                "a mapping is required: give it as an argument or with -f FILE"
            );
            return 1;
        }
    };
    let mapping = match Mapping::compile(&src, &env) {
        Ok(m) => m,
        Err(d) => {
            let _ = writeln!(stderr, "failed to parse mapping:\n{d}");
            return 1;
        }
    };
    let meta: Metadata = match &args.meta {
        None => Metadata::new(),
        Some(text) => match Value::from_json(text.as_bytes()) {
            Ok(Value::Object(o)) => o,
            Ok(other) => {
                let _ = writeln!(
                    stderr,
                    "metadata must be a JSON object, got {}",
                    other.type_name()
                );
                return 1;
            }
            Err(e) => {
                let _ = writeln!(stderr, "metadata is not valid JSON: {e}");
                return 1;
            }
        },
    };

    let mut failed = false;
    let shared_meta = (!meta.is_empty()).then(|| Arc::new(meta));
    let mut out = Vec::with_capacity(CHUNK);
    let mut one =
        |msg: Message, out: &mut Vec<u8>, stderr: &mut dyn Write| match mapping.apply_owned(msg) {
            Ok(Some(result)) => {
                result.write_payload(out);
                out.push(b'\n');
            }
            Ok(None) => {}
            Err(f) => {
                failed = true;
                let _ = writeln!(stderr, "failed to execute mapping: {}", f.error);
            }
        };

    if args.single {
        let mut all = Vec::new();
        if let Err(e) = stdin.read_to_end(&mut all) {
            let _ = writeln!(stderr, "failed to read stdin: {e}");
            return 1;
        }
        one(message(all.into(), &shared_meta), &mut out, &mut stderr);
    } else {
        // A second thread reads, splits and parses while this one maps and writes: the
        // two halves take about as long, so a second core nearly doubles the rate. Order
        // is kept: batches come over one channel, in the order read.
        let parse = mapping.reads_this();
        let (tx, rx) = std::sync::mpsc::sync_channel(4);
        let read_error = std::thread::scope(|scope| {
            let meta = &shared_meta;
            let reader = scope.spawn(move || read_lines(stdin, tx, meta, parse));
            for batch in rx {
                for msg in batch {
                    one(msg, &mut out, &mut stderr);
                }
                // What a read held is written at once: output goes out as soon as the
                // input pauses, so an interactive session sees each result at once.
                if stdout.write_all(&out).and_then(|_| stdout.flush()).is_err() {
                    // The reader went away (a closed pipe): nothing more can be written.
                    return None;
                }
                out.clear();
            }
            reader.join().ok().flatten()
        });
        if let Some(e) = read_error {
            let _ = writeln!(stderr, "failed to read stdin: {e}");
            return 1;
        }
    }
    let _ = stdout.write_all(&out);
    let _ = stdout.flush();
    i32::from(failed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn go(args: BloblArgs, input: &str) -> (i32, String, String) {
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let code = run(args, input.as_bytes(), &mut out, &mut err);
        (
            code,
            String::from_utf8(out).unwrap(),
            String::from_utf8(err).unwrap(),
        )
    }

    #[test]
    fn one_result_per_line_and_errors_go_on() {
        let args = BloblArgs {
            mapping: Some("root = if this.n < 0 { deleted() } else { this.n * 2 }".into()),
            ..Default::default()
        };
        let (code, out, err) = go(args, "{\"n\":1}\n{\"n\":-1}\nnope\n{\"n\":3}\n");
        assert_eq!(out, "2\n6\n");
        assert!(err.contains("failed to execute mapping"), "{err}");
        assert_eq!(code, 1);
    }

    #[test]
    fn line_endings_long_lines_and_a_last_line_without_newline() {
        let args = BloblArgs {
            mapping: Some("root = content().string().length()".into()),
            ..Default::default()
        };
        let long = "x".repeat(3 * CHUNK + 7);
        let input = format!("ab\r\n\n{long}\nabc");
        let (code, out, err) = go(args, &input);
        assert_eq!(code, 0, "{err}");
        assert_eq!(out, format!("2\n0\n{}\n3\n", long.len()));
    }

    #[test]
    fn single_message_and_metadata() {
        let args = BloblArgs {
            mapping: Some("root = content().string().length().string() + @k".into()),
            meta: Some(r#"{"k":"!"}"#.into()),
            single: true,
            ..Default::default()
        };
        let (code, out, _) = go(args, "ab\ncd");
        assert_eq!((code, out.as_str()), (0, "5!\n"));
    }

    #[test]
    fn parse_errors_stop_at_once() {
        let args = BloblArgs {
            mapping: Some("root = (".into()),
            ..Default::default()
        };
        let (code, out, err) = go(args, "{}\n");
        assert_eq!(code, 1);
        assert!(out.is_empty());
        assert!(err.contains("line 1"), "{err}");
    }

    #[test]
    fn mapping_from_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.blobl");
        std::fs::write(&path, "root.up = this.s.uppercase()\n").unwrap();
        let (code, out, _) = go(
            BloblArgs {
                file: Some(path),
                ..Default::default()
            },
            "{\"s\":\"x\"}\n",
        );
        assert_eq!((code, out.as_str()), (0, "{\"up\":\"X\"}\n"));
    }
}
