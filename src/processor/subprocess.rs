//! `subprocess`: keeps one program running and sends it each message on its standard
//! input; the program answers each with one frame on standard output (the new payload)
//! or one line on standard error (the message is marked with it and left as it was).
//!
//! Frames are separated by `codec_send` / `codec_recv`: `lines` (a newline after each),
//! `length_prefixed_uint32_be` (a 4-byte big-endian length before each) or `netstring`
//! (`<length>:<bytes>,`). An answer longer than `max_buffer` is an error. A program that
//! exits is started again, and the message it did not answer is sent once more to the
//! new one. Running programs reaches the host: streams served by the gateway may use
//! this processor only when the gateway allows it.

use std::process::Stdio;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin};
use tokio::sync::{mpsc, Mutex};

use super::BuildProcessor;
use crate::component::registry::Spec;
use crate::component::{BuildContext, BuildError, ComponentSpec, Example, Kind, Processor};
use crate::message::{Batch, Message};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum FrameCodec {
    Lines,
    LengthPrefixedUint32Be,
    Netstring,
}

fn lines() -> FrameCodec {
    FrameCodec::Lines
}

fn default_max_buffer() -> usize {
    65536
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SubprocessConfig {
    /// The program to run; found on `PATH` unless a path.
    pub name: String,
    /// Its arguments.
    #[serde(default)]
    pub args: Vec<String>,
    /// The largest answer, in bytes, read from the program.
    #[serde(default = "default_max_buffer")]
    pub max_buffer: usize,
    /// How messages are framed on the program's input.
    #[serde(default = "lines")]
    pub codec_send: FrameCodec,
    /// How answers are framed on the program's output.
    #[serde(default = "lines")]
    pub codec_recv: FrameCodec,
}

impl Spec for SubprocessConfig {
    const SPEC: ComponentSpec = ComponentSpec {
        name: "subprocess",
        kind: Kind::Processor,
        summary: "Sends each message to a long-running program and takes its answer.",
        examples: &[Example {
            title: "Filter each line through sed",
            yaml: "input:\n  stdin: {}\npipeline:\n  processors:\n    - subprocess:\n        name: sed\n        args: [-u, s/foo/bar/g]\noutput:\n  stdout: {}\n",
        }],
    };
}

impl BuildProcessor for SubprocessConfig {
    fn build(&self, cx: &BuildContext) -> Result<Box<dyn Processor>, BuildError> {
        super::command::program_exists(&self.name).map_err(|e| cx.error(format!("name: {e}")))?;
        if self.max_buffer == 0 {
            return Err(cx.error("max_buffer: must be above zero"));
        }
        Ok(Box::new(Subprocess {
            cfg: self.clone(),
            running: Mutex::new(None),
        }))
    }
}

/// One answer of the program.
enum Reply {
    Out(Vec<u8>),
    Err(String),
    /// Its output could not be read as frames (too long, malformed).
    Broken(String),
}

struct Running {
    child: Child,
    stdin: ChildStdin,
    replies: mpsc::Receiver<Reply>,
}

pub struct Subprocess {
    cfg: SubprocessConfig,
    running: Mutex<Option<Running>>,
}

impl Subprocess {
    fn start(&self) -> Result<Running, String> {
        let mut child = tokio::process::Command::new(&self.cfg.name)
            .args(&self.cfg.args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("subprocess `{}` cannot start: {e}", self.cfg.name))?;
        let (tx, replies) = mpsc::channel(16);
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err("subprocess: its standard streams are not available".into());
        };
        let (codec, max) = (self.cfg.codec_recv, self.cfg.max_buffer);
        let out_tx = tx.clone();
        tokio::spawn(async move {
            let mut reader = BufReader::new(stdout);
            loop {
                let reply = match read_frame(&mut reader, codec, max).await {
                    Ok(Some(frame)) => Reply::Out(frame),
                    Ok(None) => break,
                    Err(e) => Reply::Broken(e),
                };
                let broken = matches!(reply, Reply::Broken(_));
                if out_tx.send(reply).await.is_err() || broken {
                    break;
                }
            }
        });
        tokio::spawn(async move {
            let mut reader = BufReader::new(stderr);
            while let Ok(Some(line)) = read_frame(&mut reader, FrameCodec::Lines, max).await {
                let line = String::from_utf8_lossy(&line).into_owned();
                if tx.send(Reply::Err(line)).await.is_err() {
                    break;
                }
            }
        });
        Ok(Running {
            child,
            stdin,
            replies,
        })
    }

    /// Sends one message and waits for its answer. `Err(true)`: the program is gone (or
    /// out of step) and was stopped; `Err(false)`: the answer is a failure.
    async fn exchange(
        &self,
        slot: &mut Option<Running>,
        payload: &[u8],
    ) -> Result<Vec<u8>, (bool, String)> {
        if let Some(r) = slot.as_mut() {
            if let Ok(Some(status)) = r.child.try_wait() {
                tracing::warn!(program = %self.cfg.name, "subprocess exited ({status}); starting it again");
                *slot = None;
            }
        }
        if slot.is_none() {
            *slot = Some(self.start().map_err(|e| (false, e))?);
        }
        let Some(r) = slot.as_mut() else {
            return Err((false, "subprocess: not running".into()));
        };
        let frame = encode(self.cfg.codec_send, payload);
        let sent = async {
            r.stdin.write_all(&frame).await?;
            r.stdin.flush().await
        }
        .await;
        if let Err(e) = sent {
            *slot = None;
            return Err((
                true,
                format!("subprocess `{}`: cannot write: {e}", self.cfg.name),
            ));
        }
        match r.replies.recv().await {
            Some(Reply::Out(out)) => Ok(out),
            Some(Reply::Err(line)) => Err((false, format!("subprocess: {line}"))),
            Some(Reply::Broken(e)) => {
                *slot = None;
                Err((true, format!("subprocess `{}`: {e}", self.cfg.name)))
            }
            None => {
                let status = match r.child.wait().await {
                    Ok(s) => s.to_string(),
                    Err(e) => e.to_string(),
                };
                *slot = None;
                Err((
                    true,
                    format!("subprocess `{}` exited ({status})", self.cfg.name),
                ))
            }
        }
    }

    async fn handle(&self, msg: &mut Message) {
        let mut slot = self.running.lock().await;
        let payload = msg.payload().clone();
        let mut result = self.exchange(&mut slot, &payload).await;
        // The program went away without answering: one more try with a new one.
        if let Err((true, _)) = &result {
            result = self.exchange(&mut slot, &payload).await;
        }
        match result {
            Ok(out) => msg.set_payload(out),
            Err((_, e)) => msg.set_error(e),
        }
    }
}

fn encode(codec: FrameCodec, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(payload.len() + 12);
    match codec {
        FrameCodec::Lines => {
            out.extend_from_slice(payload);
            out.push(b'\n');
        }
        FrameCodec::LengthPrefixedUint32Be => {
            out.extend_from_slice(&(payload.len() as u32).to_be_bytes());
            out.extend_from_slice(payload);
        }
        FrameCodec::Netstring => {
            out.extend_from_slice(payload.len().to_string().as_bytes());
            out.push(b':');
            out.extend_from_slice(payload);
            out.push(b',');
        }
    }
    out
}

/// The next frame, `None` at the end of the stream.
async fn read_frame<R: AsyncRead + Unpin>(
    r: &mut BufReader<R>,
    codec: FrameCodec,
    max: usize,
) -> Result<Option<Vec<u8>>, String> {
    let io = |e: std::io::Error| format!("cannot read its output: {e}");
    let too_long = |n: usize| format!("an answer of {n} bytes is over max_buffer ({max})");
    match codec {
        FrameCodec::Lines => {
            let mut buf = Vec::new();
            let n = (&mut *r)
                .take(max as u64 + 1)
                .read_until(b'\n', &mut buf)
                .await
                .map_err(io)?;
            if n == 0 {
                return Ok(None);
            }
            if buf.last() == Some(&b'\n') {
                buf.pop();
            } else if buf.len() > max {
                return Err(too_long(buf.len()));
            }
            Ok(Some(buf))
        }
        FrameCodec::LengthPrefixedUint32Be => {
            let mut len = [0u8; 4];
            match r.read_exact(&mut len).await {
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
                Err(e) => return Err(io(e)),
            }
            let len = u32::from_be_bytes(len) as usize;
            if len > max {
                return Err(too_long(len));
            }
            let mut buf = vec![0; len];
            r.read_exact(&mut buf).await.map_err(io)?;
            Ok(Some(buf))
        }
        FrameCodec::Netstring => {
            let mut digits = Vec::new();
            let n = (&mut *r)
                .take(21)
                .read_until(b':', &mut digits)
                .await
                .map_err(io)?;
            if n == 0 {
                return Ok(None);
            }
            if digits.pop() != Some(b':') {
                return Err("malformed netstring: no `:` after the length".into());
            }
            let len: usize = std::str::from_utf8(&digits)
                .ok()
                .and_then(|s| s.parse().ok())
                .ok_or("malformed netstring: the length is not a number")?;
            if len > max {
                return Err(too_long(len));
            }
            let mut buf = vec![0; len + 1];
            r.read_exact(&mut buf).await.map_err(io)?;
            if buf.pop() != Some(b',') {
                return Err("malformed netstring: no `,` after the bytes".into());
            }
            Ok(Some(buf))
        }
    }
}

#[async_trait]
impl Processor for Subprocess {
    async fn process(&self, mut batch: Batch) -> Vec<Batch> {
        for msg in batch.iter_mut() {
            self.handle(msg).await;
        }
        super::nonempty(batch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cx() -> BuildContext {
        BuildContext::new("t", crate::http::Routes::new(), Default::default()).child("s")
    }

    fn build(yaml: &str) -> Box<dyn Processor> {
        let cfg: SubprocessConfig = serde_yaml::from_str(yaml).unwrap_or_else(|e| panic!("{e}"));
        cfg.build(&cx()).unwrap_or_else(|e| panic!("{e}"))
    }

    async fn run(p: &dyn Processor, payloads: &[&[u8]]) -> Vec<Message> {
        let batch = payloads.iter().map(|p| Message::new(p.to_vec())).collect();
        p.process(batch).await.into_iter().flatten().collect()
    }

    #[tokio::test]
    async fn one_program_answers_every_message() {
        // The shell counts: one process served all three.
        let p = build(
            "name: sh\nargs: ['-c', 'n=0; while read -r l; do n=$((n+1)); echo \"$n:$l\"; done']",
        );
        let out = run(&*p, &[b"a", b"b"]).await;
        let out2 = run(&*p, &[b"c"]).await;
        assert_eq!(&out[0].payload()[..], b"1:a");
        assert_eq!(&out[1].payload()[..], b"2:b");
        assert_eq!(&out2[0].payload()[..], b"3:c");
    }

    #[tokio::test]
    async fn binary_codecs_round_trip() {
        for codec in ["length_prefixed_uint32_be", "netstring"] {
            let p = build(&format!(
                "{{name: cat, codec_send: {codec}, codec_recv: {codec}}}"
            ));
            let out = run(&*p, &[b"two\nlines", b"", b"x,y:z"]).await;
            assert_eq!(&out[0].payload()[..], b"two\nlines", "{codec}");
            assert_eq!(&out[1].payload()[..], b"", "{codec}");
            assert_eq!(&out[2].payload()[..], b"x,y:z", "{codec}");
            assert!(out.iter().all(|m| m.error().is_none()), "{codec}");
        }
    }

    #[tokio::test]
    async fn stderr_marks_the_message() {
        let p = build(
            "name: sh\nargs: ['-c', 'while read -r l; do if [ \"$l\" = bad ]; then echo \"no: $l\" >&2; else echo \"ok $l\"; fi; done']",
        );
        let out = run(&*p, &[b"fine", b"bad", b"also"]).await;
        assert_eq!(&out[0].payload()[..], b"ok fine");
        assert_eq!(&out[1].payload()[..], b"bad");
        assert!(
            out[1].error().unwrap().contains("no: bad"),
            "{:?}",
            out[1].error()
        );
        assert_eq!(&out[2].payload()[..], b"ok also");
    }

    #[tokio::test]
    async fn a_program_that_exits_is_started_again() {
        // Answers one message, then exits: every message still gets its answer.
        let p = build("name: sh\nargs: ['-c', 'read -r l; echo \"once $l\"']");
        let out = run(&*p, &[b"a", b"b", b"c"]).await;
        for (m, want) in out.iter().zip(["once a", "once b", "once c"]) {
            assert!(m.error().is_none(), "{:?}", m.error());
            assert_eq!(&m.payload()[..], want.as_bytes());
        }
        // One that never answers fails the message, saying how it ended.
        let p = build("name: sh\nargs: ['-c', 'read -r l; exit 4']");
        let out = run(&*p, &[b"a"]).await;
        assert!(
            out[0].error().unwrap().contains("exit status: 4"),
            "{:?}",
            out[0].error()
        );
    }

    #[tokio::test]
    async fn answers_over_max_buffer_are_errors() {
        let p = build("{name: cat, max_buffer: 4}");
        let out = run(&*p, &[b"abc", b"too long"]).await;
        assert_eq!(&out[0].payload()[..], b"abc");
        assert!(
            out[1].error().unwrap().contains("max_buffer"),
            "{:?}",
            out[1].error()
        );
    }

    #[test]
    fn bad_configs_are_refused() {
        let cfg: SubprocessConfig = serde_yaml::from_str("name: no-such-program-here").unwrap();
        assert!(cfg
            .build(&cx())
            .err()
            .unwrap()
            .message
            .contains("not found"));
        let cfg: SubprocessConfig = serde_yaml::from_str("{name: cat, max_buffer: 0}").unwrap();
        assert!(cfg
            .build(&cx())
            .err()
            .unwrap()
            .message
            .contains("max_buffer"));
        assert!(serde_yaml::from_str::<SubprocessConfig>("{name: cat, codec_send: csv}").is_err());
    }
}
