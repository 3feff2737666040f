//! `sluice blobl`: runs a mapping over stdin, one message per line (or all of stdin as
//! one message), writing each result on its own line. Errors go to stderr and the run
//! goes on; the exit status is 1 when any message failed, and a mapping that does not
//! compile stops the run at once.

use std::io::{BufRead, Write};
use std::path::PathBuf;

use super::{Env, Mapping};
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

/// Runs the command and returns its exit status.
pub fn run(
    args: BloblArgs,
    mut stdin: impl BufRead,
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
    let mut one = |payload: Vec<u8>, stdout: &mut dyn Write, stderr: &mut dyn Write| {
        let mut msg = Message::new(payload);
        msg.set_metadata(meta.clone());
        let batch = vec![msg];
        match mapping.apply(&batch, 0) {
            Ok(Some(out)) => {
                let _ = stdout.write_all(out.payload());
                let _ = stdout.write_all(b"\n");
            }
            Ok(None) => {}
            Err(e) => {
                failed = true;
                let _ = writeln!(stderr, "failed to execute mapping: {e}");
            }
        }
    };

    if args.single {
        let mut all = Vec::new();
        if let Err(e) = stdin.read_to_end(&mut all) {
            let _ = writeln!(stderr, "failed to read stdin: {e}");
            return 1;
        }
        one(all, &mut stdout, &mut stderr);
    } else {
        let mut line = Vec::new();
        loop {
            line.clear();
            match stdin.read_until(b'\n', &mut line) {
                Ok(0) => break,
                Ok(_) => {
                    while matches!(line.last(), Some(b'\n' | b'\r')) {
                        line.pop();
                    }
                    one(line.clone(), &mut stdout, &mut stderr);
                }
                Err(e) => {
                    let _ = writeln!(stderr, "failed to read stdin: {e}");
                    return 1;
                }
            }
        }
    }
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
