//! `command`: runs a program for each message, the payload on its standard input, and
//! replaces the payload with what the program writes to its standard output. A program
//! that cannot start or exits with a failure status leaves the message as it was, marked
//! with the status and what it wrote to standard error.
//!
//! `name` may be interpolated per message and `args_mapping` is a mapping that gives the
//! arguments as an array. Running programs reaches the host: streams served by the
//! gateway may use this processor only when the gateway allows it.

use std::process::Stdio;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use tokio::io::AsyncWriteExt;

use super::BuildProcessor;
use crate::component::registry::Spec;
use crate::component::{BuildContext, BuildError, ComponentSpec, Example, Kind, Processor};
use crate::config::{Interp, MappingText};
use crate::mapping::Mapping;
use crate::message::Batch;
use crate::value::Value;

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CommandConfig {
    /// The program to run (interpolated per message); found on `PATH` unless a path.
    pub name: Interp,
    /// A mapping giving the program's arguments as an array of strings.
    #[serde(default)]
    pub args_mapping: Option<MappingText>,
}

impl Spec for CommandConfig {
    const SPEC: ComponentSpec = ComponentSpec {
        name: "command",
        kind: Kind::Processor,
        summary: "Runs a program per message, payload in and standard output back.",
        examples: &[Example {
            title: "Upper-case every line",
            yaml: "input:\n  stdin: {}\npipeline:\n  processors:\n    - command:\n        name: tr\n        args_mapping: '[ \"a-z\", \"A-Z\" ]'\noutput:\n  stdout: {}\n",
        }],
    };
}

impl BuildProcessor for CommandConfig {
    fn build(&self, cx: &BuildContext) -> Result<Box<dyn Processor>, BuildError> {
        if let Some(name) = self.name.static_value() {
            if name.trim().is_empty() {
                return Err(cx.error("name: the program to run is empty"));
            }
            program_exists(name).map_err(|e| cx.error(format!("name: {e}")))?;
        }
        Ok(Box::new(Command {
            name: self.name.clone(),
            args: self.args_mapping.as_ref().map(|m| m.mapping().clone()),
        }))
    }
}

/// Whether `name` can be run: a path that exists, or a program on `PATH`.
pub(crate) fn program_exists(name: &str) -> Result<(), String> {
    if name.contains('/') {
        return if std::path::Path::new(name).is_file() {
            Ok(())
        } else {
            Err(format!("`{name}` does not exist"))
        };
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    if std::env::split_paths(&path).any(|dir| dir.join(name).is_file()) {
        Ok(())
    } else {
        Err(format!("`{name}` is not found on PATH"))
    }
}

pub struct Command {
    name: Interp,
    args: Option<Mapping>,
}

impl Command {
    async fn run(&self, batch: &Batch, i: usize) -> Result<Vec<u8>, String> {
        let name = self
            .name
            .render(batch, i)
            .map_err(|e| format!("command name: {e}"))?;
        let args = match &self.args {
            None => Vec::new(),
            Some(m) => match m
                .query_in(batch, i)
                .map_err(|e| format!("args_mapping: {e}"))?
            {
                Value::Array(items) => items
                    .into_iter()
                    .map(|v| match v {
                        Value::String(s) => Ok(s),
                        Value::Int(_) | Value::Float(_) | Value::Bool(_) => {
                            Ok(String::from_utf8_lossy(&v.to_json()).into_owned())
                        }
                        other => Err(format!(
                            "args_mapping: arguments are strings or numbers, not {}",
                            String::from_utf8_lossy(&other.to_json())
                        )),
                    })
                    .collect::<Result<Vec<_>, _>>()?,
                other => {
                    return Err(format!(
                        "args_mapping: expected an array of arguments, got {}",
                        String::from_utf8_lossy(&other.to_json())
                    ))
                }
            },
        };
        let mut child = tokio::process::Command::new(&name)
            .args(&args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("command `{name}` cannot start: {e}"))?;
        // Written from a task of its own: a program that writes much before reading all
        // of its input would otherwise wait on us while we wait on it.
        let stdin = child.stdin.take();
        let payload = batch[i].payload().clone();
        let writer = tokio::spawn(async move {
            if let Some(mut stdin) = stdin {
                // A program that exits without reading all its input is not an error.
                let _ = stdin.write_all(&payload).await;
            }
        });
        let output = child
            .wait_with_output()
            .await
            .map_err(|e| format!("command `{name}`: {e}"))?;
        let _ = writer.await;
        if !output.status.success() {
            let stderr = String::from_utf8_lossy(&output.stderr);
            return Err(format!(
                "command `{name}` failed ({}): {}",
                output.status,
                stderr.trim()
            ));
        }
        Ok(output.stdout)
    }
}

#[async_trait]
impl Processor for Command {
    async fn process(&self, mut batch: Batch) -> Vec<Batch> {
        for i in 0..batch.len() {
            match self.run(&batch, i).await {
                Ok(out) => batch[i].set_payload(out),
                Err(e) => batch[i].set_error(e),
            }
        }
        super::nonempty(batch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::Message;
    use crate::processor::chain::test_support::text;

    fn cx() -> BuildContext {
        BuildContext::new("t", crate::http::Routes::new(), Default::default()).child("c")
    }

    fn build(yaml: &str) -> Box<dyn Processor> {
        let cfg: CommandConfig = serde_yaml::from_str(yaml).unwrap_or_else(|e| panic!("{e}"));
        cfg.build(&cx()).unwrap_or_else(|e| panic!("{e}"))
    }

    async fn run(p: &dyn Processor, msgs: Vec<Message>) -> Vec<Message> {
        p.process(msgs).await.into_iter().flatten().collect()
    }

    #[tokio::test]
    async fn the_payload_goes_in_and_stdout_comes_back() {
        let p = build("name: tr\nargs_mapping: '[ \"a-z\", \"A-Z\" ]'");
        let out = run(&*p, vec![Message::new("hello"), Message::new("world")]).await;
        assert_eq!(text(&out[0]), "HELLO");
        assert_eq!(text(&out[1]), "WORLD");
    }

    #[tokio::test]
    async fn arguments_and_name_come_from_the_message() {
        let p = build(
            "name: '${! this.prog }'\nargs_mapping: '[ \"-c\", this.script, \"sh\", this.n ]'",
        );
        let msg = Message::new(r#"{"prog":"sh","script":"echo got $1","n":3}"#);
        let out = run(&*p, vec![msg]).await;
        assert!(out[0].error().is_none(), "{:?}", out[0].error());
        assert_eq!(text(&out[0]), "got 3\n");
    }

    #[tokio::test]
    async fn failures_keep_the_message_and_say_why() {
        let p = build("name: sh\nargs_mapping: '[ \"-c\", \"echo broken >&2; exit 3\" ]'");
        let out = run(&*p, vec![Message::new("keep me")]).await;
        assert_eq!(text(&out[0]), "keep me");
        let e = out[0].error().unwrap();
        assert!(e.contains("exit status: 3") && e.contains("broken"), "{e}");
        let p = build("name: sh\nargs_mapping: 'this.args'");
        let out = run(&*p, vec![Message::new(r#"{"args":"-c"}"#)]).await;
        assert!(out[0].error().unwrap().contains("expected an array"));
        let p = build("name: '${! this.prog }'");
        let out = run(
            &*p,
            vec![Message::new(r#"{"prog":"no-such-program-here"}"#)],
        )
        .await;
        assert!(out[0].error().unwrap().contains("cannot start"));
    }

    #[tokio::test]
    async fn a_program_that_ignores_its_input_still_answers() {
        let big = "x".repeat(1 << 20);
        let p = build("name: echo\nargs_mapping: '[ \"done\" ]'");
        let out = run(&*p, vec![Message::new(big)]).await;
        assert!(out[0].error().is_none(), "{:?}", out[0].error());
        assert_eq!(text(&out[0]), "done\n");
    }

    #[test]
    fn a_missing_program_is_refused_at_build() {
        let cfg: CommandConfig = serde_yaml::from_str("name: no-such-program-here").unwrap();
        let e = cfg.build(&cx()).err().unwrap();
        assert!(e.message.contains("not found on PATH"), "{e}");
        let cfg: CommandConfig = serde_yaml::from_str("name: /no/such/file").unwrap();
        assert!(cfg.build(&cx()).is_err());
        assert!(
            serde_yaml::from_str::<CommandConfig>("{name: sh, args_mapping: 'root = '}").is_err()
        );
    }
}
