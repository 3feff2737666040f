//! The processors that are nothing but mapping: `mapping` (and its `bloblang` alias),
//! `mutation`, `branch`'s request and result maps, and `switch` checks. They are plain
//! functions over batches; the engine wraps them in its processor trait.
//!
//! As everywhere in the engine, a failure never drops a message: it is marked with
//! `set_error` and passed on unchanged, where `error()` and `catch` can see it.

use super::{Mapping, MappingError};
use crate::message::Batch;
use crate::value::Value;

/// The `mapping` processor: each message is replaced by what the mapping builds.
/// Deleted messages leave the batch; an empty result means all were filtered.
pub fn run_mapping(m: &Mapping, batch: Batch) -> Vec<Batch> {
    let out: Batch = if m.edits_in_place() {
        // No message reads another of the batch: each can be handed over whole.
        batch
            .into_iter()
            .filter_map(|msg| match m.apply_owned(msg) {
                Ok(out) => out,
                Err(failed) => {
                    let super::Failed { mut message, error } = *failed;
                    message.set_error(error.to_string());
                    Some(message)
                }
            })
            .collect()
    } else {
        (0..batch.len())
            .filter_map(|i| match m.apply(&batch, i) {
                Ok(out) => out,
                Err(e) => {
                    let mut failed = batch[i].clone();
                    failed.set_error(e.to_string());
                    Some(failed)
                }
            })
            .collect()
    };
    if out.is_empty() {
        Vec::new()
    } else {
        vec![out]
    }
}

/// The `mutation` processor: each message is edited in place.
pub fn run_mutation(m: &Mapping, mut batch: Batch) -> Vec<Batch> {
    let size = batch.len();
    let mut keep = vec![true; size];
    for (i, msg) in batch.iter_mut().enumerate() {
        match m.mutate(msg, i, size) {
            Ok(k) => keep[i] = k,
            Err(e) => msg.set_error(e.to_string()),
        }
    }
    let out: Batch = batch
        .into_iter()
        .zip(keep)
        .filter(|(_, k)| *k)
        .map(|(m, _)| m)
        .collect();
    if out.is_empty() {
        Vec::new()
    } else {
        vec![out]
    }
}

/// Evaluates a `switch` case's `check` for message `index`: it must give a bool.
pub fn check(m: &Mapping, batch: &Batch, index: usize) -> Result<bool, MappingError> {
    match m.query_in(batch, index)? {
        Value::Bool(b) => Ok(b),
        other => Err(MappingError::Query(format!(
            "check must give a bool, got {}",
            super::spec::describe(&other)
        ))),
    }
}

/// The index of the first case whose check passes (a case without a check always
/// passes), or `None`. A failing check is an error for that message.
pub fn switch_case(
    cases: &[Option<Mapping>],
    batch: &Batch,
    index: usize,
) -> Result<Option<usize>, MappingError> {
    for (i, c) in cases.iter().enumerate() {
        match c {
            None => return Ok(Some(i)),
            Some(m) => {
                if check(m, batch, index)? {
                    return Ok(Some(i));
                }
            }
        }
    }
    Ok(None)
}

/// The mapping halves of a `branch` processor. The engine runs its own processors on
/// what [`Branch::request`] gives and hands the results to [`Branch::merge`].
#[derive(Debug, Clone, Default)]
pub struct Branch {
    pub request_map: Option<Mapping>,
    pub result_map: Option<Mapping>,
}

/// What goes into the branch: copies of the messages to process, with the position of
/// each in the original batch.
#[derive(Debug, Default)]
pub struct BranchRequest {
    pub batch: Batch,
    pub origin: Vec<usize>,
}

impl Branch {
    /// Maps each message into its branch copy. Messages the request map deletes skip
    /// the branch; a failing request map marks the original message.
    pub fn request(&self, original: &mut Batch) -> BranchRequest {
        let mut req = BranchRequest::default();
        for i in 0..original.len() {
            let mapped = match &self.request_map {
                None => Ok(Some(original[i].clone())),
                Some(m) => m.apply(original, i),
            };
            match mapped {
                Ok(Some(mut msg)) => {
                    msg.clear_error();
                    req.batch.push(msg);
                    req.origin.push(i);
                }
                Ok(None) => {}
                Err(e) => original[i].set_error(format!("branch request map: {e}")),
            }
        }
        req
    }

    /// Maps branch results back onto their originals. `results` must line up with the
    /// request's batch (the engine reports a count mismatch as an error on every
    /// message). A result that failed in the branch marks its original.
    pub fn merge(&self, original: &mut Batch, origin: &[usize], results: &Batch) {
        if results.len() != origin.len() {
            let msg = format!(
                "branch produced {} message(s) for {} sent; results cannot be matched",
                results.len(),
                origin.len()
            );
            for &i in origin {
                if let Some(m) = original.get_mut(i) {
                    m.set_error(msg.clone());
                }
            }
            return;
        }
        for (res, &i) in results.iter().zip(origin) {
            let Some(target) = original.get_mut(i) else {
                continue;
            };
            if let Some(e) = res.error() {
                target.set_error(format!("branch failed: {e}"));
                continue;
            }
            let Some(m) = &self.result_map else { continue };
            if let Err(e) = m.apply_onto(target, res) {
                target.set_error(format!("branch result map: {e}"));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mapping::Env;
    use crate::message::Message;

    fn m(src: &str) -> Mapping {
        Mapping::compile(src, &Env::default()).unwrap()
    }

    #[test]
    fn compiled_mappings_can_be_shared_between_threads() {
        fn ok<T: Send + Sync>() {}
        ok::<Mapping>();
        ok::<Branch>();
    }

    #[test]
    fn mapping_filters_and_marks_errors() {
        let batch = vec![
            Message::new(&br#"{"n":1}"#[..]),
            Message::new(&br#"{"n":-1}"#[..]),
            Message::new(&br#"{"n":"x"}"#[..]),
        ];
        let out = run_mapping(
            &m("root = if this.n < 0 { deleted() } else { this.n + 1 }"),
            batch,
        );
        assert_eq!(out.len(), 1);
        let b = &out[0];
        assert_eq!(b.len(), 2);
        assert_eq!(&b[0].payload()[..], b"2");
        assert!(b[1].error().is_some());
        assert_eq!(&b[1].payload()[..], br#"{"n":"x"}"#);
        assert!(run_mapping(&m("root = deleted()"), vec![Message::new("x")]).is_empty());
    }

    #[test]
    fn mutation_keeps_what_it_does_not_touch() {
        let out = run_mutation(&m("root.b = 2"), vec![Message::new(&br#"{"a":1}"#[..])]);
        assert_eq!(&out[0][0].payload()[..], br#"{"a":1,"b":2}"#);
    }

    #[test]
    fn switch_picks_the_first_passing_case() {
        let cases = vec![Some(m("this.t == \"a\"")), Some(m("this.t == \"b\"")), None];
        let batch = vec![
            Message::new(&br#"{"t":"b"}"#[..]),
            Message::new(&br#"{"t":"z"}"#[..]),
        ];
        assert_eq!(switch_case(&cases, &batch, 0).unwrap(), Some(1));
        assert_eq!(switch_case(&cases, &batch, 1).unwrap(), Some(2));
        assert!(check(&m("this.t"), &batch, 0).is_err());
    }

    #[test]
    fn branch_round_trip() {
        let b = Branch {
            request_map: Some(m("root.q = this.id")),
            result_map: Some(m("root.enriched = this.answer\nmeta from_branch = \"yes\"")),
        };
        let mut original = vec![Message::new(&br#"{"id":7}"#[..])];
        let req = b.request(&mut original);
        assert_eq!(&req.batch[0].payload()[..], br#"{"q":7}"#);
        let results = vec![Message::new(&br#"{"answer":42}"#[..])];
        b.merge(&mut original, &req.origin, &results);
        assert_eq!(&original[0].payload()[..], br#"{"enriched":42,"id":7}"#);
        assert_eq!(original[0].meta_str("from_branch").as_deref(), Some("yes"));
    }
}
