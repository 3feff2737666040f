//! `workflow`: runs named `branches` (each a `branch`: request map, processors, result
//! map) over each message, in tiers: the branches of a tier run concurrently, tiers run
//! in turn. `order` lists the tiers; when it is empty they are worked out from the
//! mappings: a branch whose `request_map` reads a field (or metadata key) another
//! branch's `result_map` writes runs after it. Reading `this` whole creates no
//! dependency. A cycle is a build error.
//!
//! When `meta_path` is set (`meta.workflow` by default) each message gets an object
//! there listing the branches that `succeeded`, were `skipped` (the request map
//! deleted the message) or `failed` (with why), plus the object found there before as
//! `previous`. Branches that succeeded or were skipped in that earlier object are
//! skipped this time, and an `apply` array in it limits the run to the branches it
//! names; so a message sent round again only retries what failed. With an empty
//! `meta_path`, a failed branch marks the message with an error instead.

use std::collections::{BTreeMap, BTreeSet};

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;

use super::branch::BranchConfig;
use super::chain::Chain;
use super::BuildProcessor;
use crate::component::registry::Spec;
use crate::component::{BuildContext, BuildError, ComponentSpec, Example, Kind, Processor};
use crate::mapping::ast::{Arg, Expr, ExprKind, Seg, Stmt};
use crate::mapping::Mapping;
use crate::message::{Batch, Message};
use crate::value::{Object, Value};

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WorkflowConfig {
    /// Dot path in the payload of the object recording each run ("": none).
    #[serde(default = "default_meta_path")]
    pub meta_path: String,
    /// Tiers of branch names, run in turn; worked out from the mappings when empty.
    #[serde(default)]
    pub order: Vec<Vec<String>>,
    /// The branches, by name.
    #[serde(default)]
    pub branches: BTreeMap<String, BranchConfig>,
    /// Labels of `branch` processors under `processor_resources`, used as branches named
    /// by their label.
    #[serde(default)]
    pub branch_resources: Vec<String>,
}

fn default_meta_path() -> String {
    "meta.workflow".into()
}

impl Spec for WorkflowConfig {
    const SPEC: ComponentSpec = ComponentSpec {
        name: "workflow",
        kind: Kind::Processor,
        summary: "Runs named branches in tiers, concurrently within a tier.",
        examples: &[Example {
            title: "Two lookups, then one that needs both",
            yaml: "input:\n  stdin: {}\npipeline:\n  processors:\n    - workflow:\n        branches:\n          user:\n            request_map: 'root.id = this.user_id'\n            processors:\n              - http: {url: 'http://127.0.0.1:8080/users'}\n            result_map: 'root.user = this'\n          order:\n            request_map: 'root.id = this.order_id'\n            processors:\n              - http: {url: 'http://127.0.0.1:8080/orders'}\n            result_map: 'root.order = this'\n          summary:\n            request_map: 'root = {\"name\": this.user.name, \"total\": this.order.total}'\n            processors:\n              - mapping: 'root = \"%v owes %v\".format(this.name, this.total)'\n            result_map: 'root.summary = this'\noutput:\n  stdout: {}\n",
        }],
    };
}

impl WorkflowConfig {
    /// The inline branches and those of `branch_resources`, by name.
    fn all_branches(
        &self,
        cx: &BuildContext,
    ) -> Result<BTreeMap<String, BranchConfig>, BuildError> {
        let mut all = self.branches.clone();
        for label in &self.branch_resources {
            let config = cx
                .resources
                .component::<super::ProcessorConfig>(Kind::Processor, label)
                .map_err(|e| cx.error(format!("`branch_resources`: {e}")))?;
            let super::ProcessorKind::Branch(branch) = &config.kind else {
                return Err(cx.error(format!(
                    "`branch_resources`: `{label}` is a `{}` processor, not a `branch`",
                    config.type_name()
                )));
            };
            if all.insert(label.clone(), branch.clone()).is_some() {
                return Err(cx.error(format!(
                    "`branch_resources`: `{label}` is also the name of a branch in `branches`"
                )));
            }
        }
        Ok(all)
    }
}

struct Stage {
    name: String,
    request_map: Option<Mapping>,
    result_map: Option<Mapping>,
    chain: Chain,
}

impl BuildProcessor for WorkflowConfig {
    fn build(&self, cx: &BuildContext) -> Result<Box<dyn Processor>, BuildError> {
        let branches = self.all_branches(cx)?;
        if branches.is_empty() {
            return Err(cx.error(
                "`workflow` needs at least one branch in `branches` or `branch_resources`",
            ));
        }
        let mut stages = Vec::with_capacity(branches.len());
        for (name, b) in &branches {
            if name.is_empty() {
                return Err(cx.error("a branch name in `branches` is empty"));
            }
            let path = format!("{}.branches.{name}", cx.id.path);
            stages.push(Stage {
                name: name.clone(),
                request_map: b.request_map.as_ref().map(|m| m.mapping().clone()),
                result_map: b.result_map.as_ref().map(|m| m.mapping().clone()),
                chain: Chain::build(&b.processors, cx, &format!("{path}.processors"))?,
            });
        }
        let named = if self.order.is_empty() {
            infer_tiers(&branches)
        } else {
            check_order(&self.order, &branches)
        }
        .map_err(|e| cx.error(e))?;
        let index = |n: &String| stages.iter().position(|s| &s.name == n);
        let tiers = named
            .iter()
            .map(|tier| tier.iter().filter_map(index).collect())
            .collect();
        let meta_path = if self.meta_path.is_empty() {
            Vec::new()
        } else {
            let segs: Vec<String> = self.meta_path.split('.').map(str::to_owned).collect();
            if segs.iter().any(String::is_empty) {
                return Err(cx.error(format!(
                    "`meta_path` `{}` has an empty segment",
                    self.meta_path
                )));
            }
            // Each segment is a level of the document the results are written into.
            if segs.len() > crate::value::MAX_DEPTH - 1 {
                return Err(cx.error(format!(
                    "`meta_path` has {} segments: at most {} fit within a document's depth",
                    segs.len(),
                    crate::value::MAX_DEPTH - 1
                )));
            }
            segs
        };
        Ok(Box::new(Workflow {
            stages,
            tiers,
            meta_path,
        }))
    }
}

/// Checks an explicit `order`: every name a branch, every branch listed exactly once.
fn check_order(
    order: &[Vec<String>],
    branches: &BTreeMap<String, BranchConfig>,
) -> Result<Vec<Vec<String>>, String> {
    let mut seen = BTreeSet::new();
    for name in order.iter().flatten() {
        if !branches.contains_key(name) {
            return Err(format!(
                "`order` names `{name}`, which is not in `branches` ({})",
                branches.keys().cloned().collect::<Vec<_>>().join(", ")
            ));
        }
        if !seen.insert(name) {
            return Err(format!("`order` lists `{name}` more than once"));
        }
    }
    let missing: Vec<&str> = branches
        .keys()
        .filter(|k| !seen.contains(k))
        .map(String::as_str)
        .collect();
    if !missing.is_empty() {
        return Err(format!(
            "branches missing from `order`: {} (list every branch, or leave `order` empty)",
            missing.join(", ")
        ));
    }
    Ok(order.iter().filter(|t| !t.is_empty()).cloned().collect())
}

/// A field path (`user.name`) or a metadata key (`@`, key) read or written by a mapping.
type Path = Vec<String>;

/// One path is within the other (or they are equal).
fn overlaps(a: &Path, b: &Path) -> bool {
    a.iter().zip(b).all(|(x, y)| x == y)
}

/// The tiers implied by the mappings: each branch runs in the tier after the last of
/// the branches whose results it reads.
pub fn infer_tiers(branches: &BTreeMap<String, BranchConfig>) -> Result<Vec<Vec<String>>, String> {
    let reads: BTreeMap<&String, Vec<Path>> = branches
        .iter()
        .map(|(k, b)| {
            let paths = b.request_map.as_ref().map_or(Ok(Vec::new()), |m| {
                let mut paths = Paths::default();
                crate::mapping::parser::parse_mapping(m.source())
                    .map(|stmts| {
                        paths.stmts(&stmts);
                        paths.reads
                    })
                    .map_err(|e| format!("branch `{k}` request_map: {e}"))
            })?;
            // Reading `this` whole would tie every branch to every other.
            Ok((k, paths.into_iter().filter(|p| !p.is_empty()).collect()))
        })
        .collect::<Result<_, String>>()?;
    let writes: BTreeMap<&String, Vec<Path>> = branches
        .iter()
        .map(|(k, b)| {
            let paths = b.result_map.as_ref().map_or(Ok(Vec::new()), |m| {
                let mut paths = Paths::default();
                crate::mapping::parser::parse_mapping(m.source())
                    .map(|stmts| {
                        paths.stmts(&stmts);
                        paths.writes
                    })
                    .map_err(|e| format!("branch `{k}` result_map: {e}"))
            })?;
            Ok((k, paths))
        })
        .collect::<Result<_, String>>()?;
    let deps: BTreeMap<&String, BTreeSet<&String>> = branches
        .keys()
        .map(|a| {
            let needs = branches
                .keys()
                .filter(|b| *b != a)
                .filter(|b| {
                    reads[a]
                        .iter()
                        .any(|r| writes[b].iter().any(|w| overlaps(r, w)))
                })
                .collect();
            (a, needs)
        })
        .collect();
    let mut placed: BTreeSet<&String> = BTreeSet::new();
    let mut tiers = Vec::new();
    while placed.len() < branches.len() {
        let tier: Vec<&String> = deps
            .iter()
            .filter(|(k, needs)| !placed.contains(*k) && needs.iter().all(|n| placed.contains(n)))
            .map(|(k, _)| *k)
            .collect();
        if tier.is_empty() {
            let stuck: Vec<&str> = deps
                .keys()
                .filter(|k| !placed.contains(*k))
                .map(|k| k.as_str())
                .collect();
            return Err(format!(
                "the branches {} depend on each other in a cycle (through what their request maps read and result maps write); set `order` explicitly",
                stuck.join(", ")
            ));
        }
        placed.extend(tier.iter().copied());
        tiers.push(tier.into_iter().cloned().collect());
    }
    Ok(tiers)
}

/// The paths a mapping reads from `this` and writes to `root` (or metadata).
#[derive(Default)]
struct Paths {
    reads: Vec<Path>,
    writes: Vec<Path>,
    /// Lambda parameters in scope: names that are not fields of `this`.
    params: Vec<String>,
}

fn meta_path(key: Option<&str>) -> Path {
    let mut p = vec!["@".to_owned()];
    p.extend(key.map(str::to_owned));
    p
}

impl Paths {
    fn stmts(&mut self, stmts: &[Stmt]) {
        for s in stmts {
            match s {
                Stmt::Assign { target, value, .. } => {
                    self.writes.push(
                        target
                            .iter()
                            .map(|s| match s {
                                Seg::Field(f) => f.clone(),
                                Seg::Index(i) => i.to_string(),
                            })
                            .collect(),
                    );
                    self.expr(value);
                }
                Stmt::Meta { key, value, .. } => {
                    self.writes.push(meta_path(key.as_deref()));
                    self.expr(value);
                }
                Stmt::Let { value, .. } => self.expr(value),
                Stmt::If {
                    branches,
                    otherwise,
                    ..
                } => {
                    for (cond, body) in branches {
                        self.expr(cond);
                        self.stmts(body);
                    }
                    if let Some(body) = otherwise {
                        self.stmts(body);
                    }
                }
                // Named maps run against what they are given, not the message.
                Stmt::Map { .. } | Stmt::Import { .. } => {}
            }
        }
    }

    /// The path of `this` an expression names, if it is one.
    fn path_of(&self, e: &Expr) -> Option<Path> {
        match &e.kind {
            ExprKind::This => Some(Vec::new()),
            ExprKind::Name(n) if !self.params.contains(n) => Some(vec![n.clone()]),
            ExprKind::Field(inner, f) => {
                let mut p = self.path_of(inner)?;
                p.push(f.clone());
                Some(p)
            }
            ExprKind::Index(inner, idx) => {
                let seg = match &idx.kind {
                    ExprKind::Lit(Value::String(s)) => s.clone(),
                    ExprKind::Lit(Value::Int(i)) => i.to_string(),
                    _ => return None,
                };
                let mut p = self.path_of(inner)?;
                p.push(seg);
                Some(p)
            }
            _ => None,
        }
    }

    fn args(&mut self, args: &[Arg]) {
        for a in args {
            match (&a.param, a.is_lambda) {
                (Some(p), _) => {
                    self.params.push(p.clone());
                    self.expr(&a.value);
                    self.params.pop();
                }
                // A lambda without a name reads its item as `this`, not the message.
                (None, true) => {}
                (None, false) => self.expr(&a.value),
            }
        }
    }

    fn expr(&mut self, e: &Expr) {
        if let Some(p) = self.path_of(e) {
            self.reads.push(p);
            return;
        }
        match &e.kind {
            ExprKind::Meta(key) => self.reads.push(meta_path(key.as_deref())),
            ExprKind::Call(name, args) => {
                if name == "meta" || name == "metadata" {
                    let key = args.first().and_then(|a| match &a.value.kind {
                        ExprKind::Lit(Value::String(s)) => Some(s.as_str()),
                        _ => None,
                    });
                    self.reads.push(meta_path(key));
                }
                self.args(args);
            }
            ExprKind::Method(recv, _, args) => {
                self.expr(recv);
                self.args(args);
            }
            ExprKind::Field(inner, _) | ExprKind::Not(inner) | ExprKind::Neg(inner) => {
                self.expr(inner)
            }
            ExprKind::Index(a, b) | ExprKind::Binary(_, a, b) => {
                self.expr(a);
                self.expr(b);
            }
            ExprKind::Slice(a, b, c, step) => {
                self.expr(a);
                for x in [b, c, step].into_iter().flatten() {
                    self.expr(x);
                }
            }
            ExprKind::Array(items) => items.iter().for_each(|x| self.expr(x)),
            ExprKind::Object(pairs) => {
                for (k, v) in pairs {
                    self.expr(k);
                    self.expr(v);
                }
            }
            ExprKind::If(branches, otherwise) => {
                for (c, v) in branches {
                    self.expr(c);
                    self.expr(v);
                }
                if let Some(o) = otherwise {
                    self.expr(o);
                }
            }
            ExprKind::Match(subject, arms) => {
                if let Some(s) = subject {
                    self.expr(s);
                }
                for (pattern, v) in arms {
                    if let crate::mapping::ast::Pattern::Expr(p) = pattern {
                        self.expr(p);
                    }
                    self.expr(v);
                }
            }
            // Inside `x.(...)`, `this` is `x`, already counted.
            ExprKind::Context(recv, _) => self.expr(recv),
            ExprKind::Lit(_)
            | ExprKind::This
            | ExprKind::Root
            | ExprKind::Name(_)
            | ExprKind::Var(_) => {}
        }
    }
}

pub struct Workflow {
    stages: Vec<Stage>,
    tiers: Vec<Vec<usize>>,
    meta_path: Vec<String>,
}

#[derive(Debug, Clone, PartialEq)]
enum Status {
    Pending,
    Succeeded,
    Skipped,
    Failed(String),
}

/// A branch's requests for one tier: copies to process and where each came from.
struct Run {
    stage: usize,
    batch: Batch,
    origin: Vec<usize>,
}

fn get_path<'v>(v: &'v Value, path: &[String]) -> Option<&'v Value> {
    path.iter().try_fold(v, |v, k| match v {
        Value::Object(o) => o.get(k),
        _ => None,
    })
}

fn set_path(v: &mut Value, path: &[String], new: Value) -> Result<(), String> {
    let Some((last, parents)) = path.split_last() else {
        *v = new;
        return Ok(());
    };
    let mut at = v;
    for (depth, k) in parents.iter().enumerate() {
        if matches!(at, Value::Null) {
            *at = Value::Object(Object::new());
        }
        let Value::Object(o) = at else {
            return Err(format!(
                "`{}` is {}, not an object",
                path[..depth].join("."),
                at.type_name()
            ));
        };
        at = o.entry(k.clone()).or_insert(Value::Null);
    }
    if matches!(at, Value::Null) {
        *at = Value::Object(Object::new());
    }
    match at {
        Value::Object(o) => {
            o.insert(last.clone(), new);
            Ok(())
        }
        other => Err(format!(
            "`{}` is {}, not an object",
            parents.join("."),
            other.type_name()
        )),
    }
}

fn names(v: Option<&Value>) -> BTreeSet<String> {
    match v {
        Some(Value::Array(items)) => items
            .iter()
            .filter_map(|i| i.as_str().map(str::to_owned))
            .collect(),
        _ => BTreeSet::new(),
    }
}

impl Workflow {
    /// The earlier record of a message and what it says to skip.
    fn previous(&self, msg: &Message) -> (Option<Value>, Vec<Status>) {
        let mut status = vec![Status::Pending; self.stages.len()];
        if self.meta_path.is_empty() {
            return (None, status);
        }
        let Some(prev) = msg
            .structured()
            .ok()
            .and_then(|v| get_path(v, &self.meta_path))
            .filter(|v| matches!(v, Value::Object(_)))
            .cloned()
        else {
            return (None, status);
        };
        let done: BTreeSet<String> = names(get_path(&prev, &["succeeded".into()]))
            .into_iter()
            .chain(names(get_path(&prev, &["skipped".into()])))
            .collect();
        let apply = get_path(&prev, &["apply".into()])
            .filter(|v| matches!(v, Value::Array(_)))
            .map(|v| names(Some(v)));
        for (s, stage) in self.stages.iter().enumerate() {
            let excluded = apply.as_ref().is_some_and(|a| !a.contains(&stage.name));
            if done.contains(&stage.name) || excluded {
                status[s] = Status::Skipped;
            }
        }
        (Some(prev), status)
    }

    fn request(&self, s: usize, batch: &Batch, status: &mut [Vec<Status>]) -> Run {
        let stage = &self.stages[s];
        let mut run = Run {
            stage: s,
            batch: Vec::new(),
            origin: Vec::new(),
        };
        for (i, st) in status.iter_mut().enumerate() {
            if st[s] != Status::Pending {
                continue;
            }
            let mapped = match &stage.request_map {
                None => Ok(Some(batch[i].clone())),
                Some(m) => m.apply(batch, i),
            };
            match mapped {
                Ok(Some(mut copy)) => {
                    copy.clear_error();
                    run.batch.push(copy);
                    run.origin.push(i);
                }
                Ok(None) => st[s] = Status::Skipped,
                Err(e) => st[s] = Status::Failed(format!("request_map: {e}")),
            }
        }
        run
    }

    fn merge(&self, run: Run, results: Batch, batch: &mut Batch, status: &mut [Vec<Status>]) {
        let s = run.stage;
        if results.len() != run.origin.len() {
            let why = format!(
                "the branch gave {} message(s) for {} sent; results cannot be matched",
                results.len(),
                run.origin.len()
            );
            for &i in &run.origin {
                status[i][s] = Status::Failed(why.clone());
            }
            return;
        }
        for (res, &i) in results.iter().zip(&run.origin) {
            status[i][s] = if let Some(e) = res.error() {
                Status::Failed(e.to_owned())
            } else {
                match &self.stages[s].result_map {
                    Some(m) => match m.apply_onto(&mut batch[i], res) {
                        Ok(_) => Status::Succeeded,
                        Err(e) => Status::Failed(format!("result_map: {e}")),
                    },
                    None => Status::Succeeded,
                }
            };
        }
    }

    fn record(&self, msg: &mut Message, status: &[Status], previous: Option<Value>) {
        let mut succeeded = Vec::new();
        let mut skipped = Vec::new();
        let mut failed = Object::new();
        for (stage, st) in self.stages.iter().zip(status) {
            let name = Value::String(stage.name.clone());
            match st {
                Status::Succeeded | Status::Pending => succeeded.push(name),
                Status::Skipped => skipped.push(name),
                Status::Failed(e) => {
                    failed.insert(stage.name.clone(), Value::String(e.clone()));
                }
            }
        }
        if self.meta_path.is_empty() {
            if !failed.is_empty() {
                let why: Vec<String> = failed
                    .iter()
                    .map(|(k, v)| format!("branch `{k}`: {}", v.to_text()))
                    .collect();
                msg.set_error(format!("workflow: {}", why.join("; ")));
            }
            return;
        }
        let mut obj = Object::new();
        obj.insert("succeeded".into(), Value::Array(succeeded));
        obj.insert("skipped".into(), Value::Array(skipped));
        obj.insert("failed".into(), Value::Object(failed));
        if let Some(prev) = previous {
            obj.insert("previous".into(), prev);
        }
        let stored = msg
            .take_structured()
            .map_err(|e| e.to_string())
            .and_then(|mut doc| {
                let r = set_path(&mut doc, &self.meta_path, Value::Object(obj));
                msg.set_structured(doc);
                r
            });
        if let Err(e) = stored {
            msg.set_error(format!(
                "workflow: cannot store its record at `{}`: {e}",
                self.meta_path.join(".")
            ));
        }
    }
}

#[async_trait]
impl Processor for Workflow {
    async fn process(&self, mut batch: Batch) -> Vec<Batch> {
        let (previous, mut status): (Vec<_>, Vec<_>) =
            batch.iter().map(|m| self.previous(m)).unzip();
        for tier in &self.tiers {
            let runs: Vec<Run> = tier
                .iter()
                .map(|&s| self.request(s, &batch, &mut status))
                .collect();
            // The branches of a tier read the same messages, so they run at once.
            let results = futures::future::join_all(runs.iter().map(|r| async {
                if r.batch.is_empty() {
                    Vec::new()
                } else {
                    self.stages[r.stage].chain.run_flat(r.batch.clone()).await
                }
            }))
            .await;
            for (run, res) in runs.into_iter().zip(results) {
                self.merge(run, res, &mut batch, &mut status);
            }
        }
        for ((msg, st), prev) in batch.iter_mut().zip(&status).zip(previous) {
            self.record(msg, st, prev);
        }
        vec![batch]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::processor::chain::test_support::{batch, build, build_error, texts};
    use std::time::{Duration, Instant};

    fn branches(yaml: &str) -> BTreeMap<String, BranchConfig> {
        serde_yaml::from_str(yaml).unwrap()
    }

    const DIAMOND: &str = "
foo:
  request_map: 'root = \"\"'
  processors: [{mapping: 'root = {\"id\": 1}'}]
  result_map: 'root.foo = this'
bar:
  request_map: 'root = this.body'
  processors: [{mapping: 'root = {\"content\": this.uppercase()}'}]
  result_map: 'root.bar = this'
baz:
  request_map: |
    root.fooid = this.foo.id
    root.barstuff = this.bar.content
  processors: [{mapping: 'root = \"%v:%v\".format(this.fooid, this.barstuff)'}]
  result_map: 'root.baz = this'
";

    #[test]
    fn tiers_follow_what_request_maps_read() {
        let tiers = infer_tiers(&branches(DIAMOND)).unwrap();
        assert_eq!(tiers, vec![vec!["bar", "foo"], vec!["baz"]]);
        let chain = branches(
            "c: {request_map: 'root = @b_done', processors: []}\nb: {request_map: 'root = this.a.x', processors: [], result_map: 'meta b_done = \"y\"'}\na: {processors: [], result_map: 'root.a = this'}\n",
        );
        assert_eq!(
            infer_tiers(&chain).unwrap(),
            vec![vec!["a"], vec!["b"], vec!["c"]]
        );
        // Reading the whole message, or a lambda's own item, creates no dependency.
        let free = branches(
            "a: {request_map: 'root = this', processors: [], result_map: 'root.a = this'}\nb: {request_map: 'root = this.items.map_each(a -> a.b)', processors: [], result_map: 'root.b = this'}\n",
        );
        assert_eq!(infer_tiers(&free).unwrap(), vec![vec!["a", "b"]]);
    }

    #[test]
    fn cycles_and_bad_orders_are_refused() {
        let cyclic = "branches:\n  a: {request_map: 'root = this.b', processors: [], result_map: 'root.a = this'}\n  b: {request_map: 'root = this.a', processors: [], result_map: 'root.b = this'}\n";
        let e = build_error::<WorkflowConfig>(cyclic);
        assert!(e.contains("cycle") && e.contains("a, b"), "{e}");
        let ok = format!("{cyclic}order: [[a], [b]]\n");
        build::<WorkflowConfig>(&ok);
        let e = build_error::<WorkflowConfig>(&format!("{cyclic}order: [[a, c], [b]]\n"));
        assert!(e.contains("`c`"), "{e}");
        let e = build_error::<WorkflowConfig>(&format!("{cyclic}order: [[a]]\n"));
        assert!(e.contains("missing") && e.contains('b'), "{e}");
        let e = build_error::<WorkflowConfig>(&format!("{cyclic}order: [[a, b], [a]]\n"));
        assert!(e.contains("more than once"), "{e}");
        let e = build_error::<WorkflowConfig>("branches: {}\n");
        assert!(e.contains("at least one branch"), "{e}");
    }

    #[tokio::test]
    async fn runs_the_dag_and_records_the_outcome() {
        let p = build::<WorkflowConfig>(&format!("branches:{}", DIAMOND.replace('\n', "\n  ")));
        let out = p.process(batch(&[r#"{"body":"hi"}"#])).await;
        let v = out[0][0].structured().unwrap().clone();
        assert_eq!(
            get_path(&v, &["baz".into()]),
            Some(&Value::String("1:HI".into()))
        );
        assert_eq!(
            get_path(&v, &["meta".into(), "workflow".into()]),
            Some(
                &Value::from_json(br#"{"failed":{},"skipped":[],"succeeded":["bar","baz","foo"]}"#)
                    .unwrap()
            )
        );
    }

    const FLAKY: &str = "
meta_path: wf
branches:
  ok:
    processors: [{mapping: 'root = \"fine\"'}]
    result_map: 'root.ok = this'
  bad:
    request_map: 'root = if this.skip_bad == true { deleted() } else { this }'
    processors: [{mapping: 'root = throw(\"down\")'}]
    result_map: 'root.bad = this'
";

    #[tokio::test]
    async fn failures_and_skips_are_recorded_and_retries_skip_what_succeeded() {
        let p = build::<WorkflowConfig>(FLAKY);
        let out = p.process(batch(&["{}", r#"{"skip_bad":true}"#])).await;
        let first = out[0][0].structured().unwrap().clone();
        let wf = get_path(&first, &["wf".into()]).unwrap();
        assert_eq!(
            get_path(wf, &["succeeded".into()]),
            Some(&Value::from_json(br#"["ok"]"#).unwrap())
        );
        let failed = get_path(wf, &["failed".into(), "bad".into()]).unwrap();
        assert!(failed.to_text().contains("down"), "{failed:?}");
        assert!(out[0][0].error().is_none(), "recorded, not marked");
        let second = out[0][1].structured().unwrap().clone();
        assert_eq!(
            get_path(&second, &["wf".into(), "skipped".into()]),
            Some(&Value::from_json(br#"["bad"]"#).unwrap())
        );

        // Sent round again: `ok` is not run a second time, `bad` is.
        let again = p.process(vec![out[0][0].clone()]).await;
        let v = again[0][0].structured().unwrap().clone();
        let wf = get_path(&v, &["wf".into()]).unwrap();
        assert_eq!(
            get_path(wf, &["skipped".into()]),
            Some(&Value::from_json(br#"["ok"]"#).unwrap())
        );
        assert!(get_path(wf, &["failed".into(), "bad".into()]).is_some());
        assert!(get_path(wf, &["previous".into(), "failed".into(), "bad".into()]).is_some());

        // `apply` limits a run to the branches it names.
        let only_bad = p
            .process(batch(&[r#"{"wf":{"apply":["ok"]},"skip_bad":false}"#]))
            .await;
        let v = only_bad[0][0].structured().unwrap().clone();
        assert_eq!(
            get_path(&v, &["wf".into(), "skipped".into()]),
            Some(&Value::from_json(br#"["bad"]"#).unwrap())
        );
        assert_eq!(
            get_path(&v, &["ok".into()]),
            Some(&Value::String("fine".into()))
        );
    }

    #[tokio::test]
    async fn without_meta_path_a_failure_marks_the_message() {
        let p = build::<WorkflowConfig>(&FLAKY.replace("meta_path: wf", "meta_path: ''"));
        let out = p.process(batch(&["{}"])).await;
        assert_eq!(texts(&out[0]), vec![r#"{"ok":"fine"}"#]);
        let e = out[0][0].error().unwrap();
        assert!(e.contains("`bad`") && e.contains("down"), "{e}");
    }

    #[tokio::test]
    async fn branches_of_a_tier_run_concurrently() {
        let p = build::<WorkflowConfig>(
            "branches:\n  a: {processors: [{sleep: {duration: 300ms}}], result_map: 'root.a = true'}\n  b: {processors: [{sleep: {duration: 300ms}}], result_map: 'root.b = true'}\n",
        );
        let start = Instant::now();
        let out = p.process(batch(&["{}"])).await;
        assert!(
            start.elapsed() < Duration::from_millis(550),
            "{:?}",
            start.elapsed()
        );
        let v = out[0][0].structured().unwrap();
        assert_eq!(get_path(v, &["a".into()]), Some(&Value::Bool(true)));
        assert_eq!(get_path(v, &["b".into()]), Some(&Value::Bool(true)));
    }

    #[tokio::test]
    async fn a_record_that_cannot_be_stored_marks_the_message() {
        let p = build::<WorkflowConfig>("branches:\n  a: {processors: []}\n");
        let out = p.process(batch(&["not json"])).await;
        assert!(out[0][0].error().unwrap().contains("meta.workflow"));
        let out = p.process(batch(&[r#"{"meta":5}"#])).await;
        assert!(out[0][0].error().unwrap().contains("not an object"));
    }

    #[tokio::test]
    async fn branch_resources_join_as_named_branches() {
        use crate::component::resources::Resources;
        let mut r = Resources::default();
        let label: crate::processor::ProcessorConfig = serde_yaml::from_str(
            "branch: {request_map: 'root = this.n', processors: [{mapping: 'root = this * 10'}], result_map: 'root.tens = this'}",
        )
        .unwrap();
        r.add_component(Kind::Processor, "tens", label);
        let not_a_branch: crate::processor::ProcessorConfig =
            serde_yaml::from_str("noop: {}").unwrap();
        r.add_component(Kind::Processor, "plain", not_a_branch);
        let cx = BuildContext::new("t", Default::default(), Default::default())
            .with_resources(std::sync::Arc::new(r));
        let config: WorkflowConfig =
            serde_yaml::from_str("{meta_path: '', branch_resources: [tens]}").unwrap();
        let p = config.build(&cx).unwrap();
        let out = p
            .process(vec![crate::message::Message::new(r#"{"n":4}"#)])
            .await;
        assert_eq!(&out[0][0].payload()[..], br#"{"n":4,"tens":40}"#);

        let config: WorkflowConfig = serde_yaml::from_str("{branch_resources: [plain]}").unwrap();
        let e = config.build(&cx).err().unwrap();
        assert!(e.message.contains("not a `branch`"), "{e}");
        let config: WorkflowConfig = serde_yaml::from_str("{branch_resources: [nope]}").unwrap();
        assert!(config
            .build(&cx)
            .err()
            .unwrap()
            .message
            .contains("no processor resource `nope`"));
    }
}
