//! `switch` output: sends each message to the output of the first case whose `check`
//! passes (with `continue: true`, to later matching cases too). The input hears once
//! every output a message went to confirmed it.

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use tokio::sync::mpsc;
use tracing::warn;

use super::{BuildOutput, OutputBuild, OutputConfig};
use crate::component::registry::Spec;
use crate::component::{BuildContext, BuildError, ComponentSpec, Example, Kind, Router};
use crate::config::MappingText;
use crate::message::{Batch, Outcome, Transaction};

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SwitchOutputConfig {
    /// The cases, tried in order.
    pub cases: Vec<SwitchOutputCase>,
    /// Refuse (as rejected) messages that no case takes, instead of dropping them.
    #[serde(default)]
    pub strict_mode: bool,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SwitchOutputCase {
    /// A mapping that gives a bool; absent means the case always matches.
    #[serde(default)]
    pub check: Option<MappingText>,
    /// Where this case's messages go.
    pub output: OutputConfig,
    /// Also try the cases after this one.
    #[serde(default, rename = "continue")]
    pub continue_: bool,
}

impl Spec for SwitchOutputConfig {
    const SPEC: ComponentSpec = ComponentSpec {
        name: "switch",
        kind: Kind::Output,
        summary: "Sends each message to the output of the first case whose check passes.",
        examples: &[Example {
            title: "Errors to one file, the rest to another",
            yaml: "input:\n  stdin: {}\noutput:\n  switch:\n    cases:\n      - check: 'this.level == \"error\"'\n        output:\n          file: {path: ./errors.log}\n      - output:\n          file: {path: ./other.log}\n",
        }],
    };
}

impl BuildOutput for SwitchOutputConfig {
    fn build(&self, cx: &BuildContext) -> Result<OutputBuild, BuildError> {
        if self.cases.is_empty() {
            return Err(cx.error("`cases` is empty"));
        }
        let children = self
            .cases
            .iter()
            .enumerate()
            .map(|(i, c)| (format!("cases[{i}].output"), c.output.clone()))
            .collect();
        Ok(OutputBuild::Router(
            Box::new(Switch {
                cases: self
                    .cases
                    .iter()
                    .map(|c| (c.check.clone(), c.continue_))
                    .collect(),
                strict: self.strict_mode,
            }),
            children,
        ))
    }
}

pub struct Switch {
    cases: Vec<(Option<MappingText>, bool)>,
    strict: bool,
}

impl Switch {
    /// Which cases take message `index`.
    fn targets(&self, batch: &Batch, index: usize) -> Vec<usize> {
        let mut out = Vec::new();
        for (i, (check_map, cont)) in self.cases.iter().enumerate() {
            let matched = match check_map {
                None => true,
                Some(m) => match m.mapping().check(batch, index) {
                    Ok(b) => b,
                    Err(e) => {
                        warn!(case = i, error = %e, "Switch check failed; the case is skipped.");
                        false
                    }
                },
            };
            if matched {
                out.push(i);
                if !cont {
                    break;
                }
            }
        }
        out
    }
}

#[async_trait]
impl Router for Switch {
    async fn route(&mut self, t: Transaction, children: &[mpsc::Sender<Transaction>]) {
        let mut per_case: Vec<Batch> = vec![Vec::new(); self.cases.len()];
        let mut unmatched = 0;
        for i in 0..t.batch.len() {
            let targets = self.targets(&t.batch, i);
            if targets.is_empty() {
                unmatched += 1;
            }
            for c in targets {
                per_case[c].push(t.batch[i].clone());
            }
        }
        if unmatched > 0 && self.strict {
            t.ack.resolve(Outcome::rejected(format!(
                "{unmatched} message(s) matched no switch case"
            )));
            return;
        }
        if unmatched > 0 {
            tracing::debug!(
                unmatched,
                "Messages matched no switch case and were dropped."
            );
        }
        for (batch, child) in per_case.into_iter().zip(children) {
            if !batch.is_empty() {
                let _ = child.send(Transaction::new(batch, t.ack.clone())).await;
            }
        }
        t.ack.resolve(Outcome::Filtered);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{Ack, Message};

    fn switch(strict: bool) -> Switch {
        Switch {
            cases: vec![
                (Some(MappingText::parse("root = this.n > 1").unwrap()), true),
                (
                    Some(MappingText::parse("root = this.n > 2").unwrap()),
                    false,
                ),
                (None, false),
            ],
            strict,
        }
    }

    #[tokio::test]
    async fn routes_by_check_with_continue() {
        let (txs, mut rxs): (Vec<_>, Vec<_>) = (0..3).map(|_| mpsc::channel(4)).unzip();
        let (ack, done) = Ack::channel();
        let batch = vec![
            Message::new(r#"{"n":1}"#),
            Message::new(r#"{"n":3}"#),
            Message::new(r#"{"n":2}"#),
        ];
        switch(false)
            .route(Transaction::new(batch, ack), &txs)
            .await;
        let first = rxs[0].recv().await.unwrap();
        let second = rxs[1].recv().await.unwrap();
        let default = rxs[2].recv().await.unwrap();
        assert_eq!(first.batch.len(), 2, "n=3 and n=2 match the first case");
        assert_eq!(
            second.batch.len(),
            1,
            "n=3 continues into the second and stops"
        );
        assert_eq!(
            default.batch.len(),
            2,
            "n=1 and n=2 (continued) reach the default"
        );
        first.ack.resolve(Outcome::Delivered);
        second.ack.resolve(Outcome::Delivered);
        default.ack.resolve(Outcome::Delivered);
        assert_eq!(done.await.unwrap(), Outcome::Delivered);
    }

    #[tokio::test]
    async fn strict_mode_rejects_unmatched() {
        let (txs, _rxs): (Vec<_>, Vec<_>) = (0..3).map(|_| mpsc::channel(4)).unzip();
        let mut s = switch(true);
        s.cases.pop();
        let (ack, done) = Ack::channel();
        s.route(
            Transaction::new(vec![Message::new(r#"{"n":0}"#)], ack),
            &txs,
        )
        .await;
        assert!(matches!(done.await.unwrap(), Outcome::Rejected(_)));
    }
}
