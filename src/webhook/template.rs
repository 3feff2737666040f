//! Webhook body templates, rendered with minijinja (Jinja2 syntax: `{{ event }}`,
//! `{% if key_id %}...{% endif %}`, `{{ message | tojson }}`).
//!
//! A template named by path is read from the templates directory the operator
//! configured, and only from there: absolute paths, `..` and links out of the directory
//! are refused, so a webhook written through the API cannot read the host's files.

use std::path::{Component, Path, PathBuf};

use minijinja::machinery::ast::{BinOpKind, CallArg, Expr, Stmt};
use minijinja::machinery::Span;
use minijinja::value::{Rest, Value, ValueKind};
use minijinja::{filters, Environment, State};
use serde::Serialize;

/// Why a body could not be rendered.
#[derive(Debug, thiserror::Error)]
pub enum TemplateError {
    #[error("template `{0}`: no templates directory is configured")]
    NoDirectory(String),
    #[error("template `{0}`: only a relative path inside the templates directory is allowed")]
    Outside(String),
    #[error("template `{path}`: {message}")]
    Read { path: String, message: String },
    #[error("template `{path}`: {message}")]
    Render { path: String, message: String },
    /// It took more steps than [`FUEL`], made more than [`MAX_BODY`] bytes, or a
    /// filter made (or was given) a value of more than [`MAX_BODY`] bytes.
    #[error("template `{path}`: {message}")]
    OverBudget { path: String, message: String },
}

/// The steps (minijinja's fuel: about one per instruction) one rendering may take.
pub const FUEL: u64 = 100_000;

/// The most bytes one rendered body may have.
pub const MAX_BODY: usize = 64 * 1024;

/// The longest template source.
pub const MAX_SOURCE: usize = 64 * 1024;

/// Makes the built-in filter a name stands for.
type Builtin = fn() -> Value;

/// The filters a template may use, each with the built-in it stands for. None takes a
/// size (`indent`, `center`, `tojson(indent=...)` could ask for gigabytes in one step,
/// which no step budget would stop), and each is registered through [`bounded`], so no
/// value one of them is given or makes is larger than [`MAX_BODY`]: a chain of them
/// (`tojson` forty times doubles a value forty times) stops at the first step past it.
const FILTERS: &[(&str, Builtin)] = &[
    ("tojson", || Value::from_function(filters::tojson)),
    ("default", || Value::from_function(filters::default)),
    ("d", || Value::from_function(filters::default)),
    ("upper", || Value::from_function(filters::upper)),
    ("lower", || Value::from_function(filters::lower)),
    ("title", || Value::from_function(filters::title)),
    ("capitalize", || Value::from_function(filters::capitalize)),
    ("trim", || Value::from_function(filters::trim)),
    ("length", || Value::from_function(filters::length)),
    ("count", || Value::from_function(filters::length)),
    ("abs", || Value::from_function(filters::abs)),
    ("int", || Value::from_function(filters::int)),
    ("float", || Value::from_function(filters::float)),
    ("round", || Value::from_function(filters::round)),
    ("escape", || Value::from_function(filters::escape)),
    ("e", || Value::from_function(filters::escape)),
    ("string", || Value::from_function(filters::string)),
    ("bool", || Value::from_function(filters::bool)),
    ("first", || Value::from_function(filters::first)),
    ("last", || Value::from_function(filters::last)),
];

/// The names of the [`FILTERS`], for errors.
fn filter_names() -> String {
    FILTERS
        .iter()
        .map(|(name, _)| *name)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Why a filter stopped: the value it was given or made is larger than [`MAX_BODY`].
/// Carried as the source of minijinja's error, so that rendering reports it as
/// [`TemplateError::OverBudget`].
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct TooLarge(String);

/// `builtin`, refusing an argument or a result larger than [`MAX_BODY`]. Only filters
/// make values in a body template (the audit refuses every other way to build one;
/// attributes, items and slices are parts of what they read), so with every filter
/// bounded no value in flight is larger than a few times [`MAX_BODY`]: the largest a
/// filter makes from an argument within the bound (`tojson` writes `<` as six bytes).
fn bounded(
    name: &'static str,
    builtin: Value,
) -> impl Fn(&State<'_, '_>, Rest<Value>) -> Result<Value, minijinja::Error> + Send + Sync + 'static
{
    move |state: &State<'_, '_>, args: Rest<Value>| {
        if args.iter().any(|a| over_body(a, 0)) {
            return Err(too_large(format!(
                "the filter `{name}` was given a value larger than {MAX_BODY} bytes"
            )));
        }
        let made = builtin.call(state, &args)?;
        if over_body(&made, 0) {
            return Err(too_large(format!(
                "the filter `{name}` made a value larger than {MAX_BODY} bytes"
            )));
        }
        Ok(made)
    }
}

fn too_large(message: String) -> minijinja::Error {
    minijinja::Error::new(minijinja::ErrorKind::InvalidOperation, message.clone())
        .with_source(TooLarge(message))
}

/// Whether `v` holds more than [`MAX_BODY`] bytes: its text, or the text of its items
/// and keys. The walk stops as soon as it knows.
fn over_body(v: &Value, depth: usize) -> bool {
    let mut left = MAX_BODY;
    !fits(v, &mut left, depth)
}

/// Takes the size of `v` from `left`; false once that runs out (or past a depth no
/// event has, which is then refused as well).
fn fits(v: &Value, left: &mut usize, depth: usize) -> bool {
    let own = match v.kind() {
        ValueKind::String => v.as_str().map_or(0, str::len),
        ValueKind::Bytes => v.as_bytes().map_or(0, <[u8]>::len),
        // A number, a bool, none: a few bytes when written.
        _ => 8,
    };
    let Some(rest) = left.checked_sub(own) else {
        return false;
    };
    *left = rest;
    match v.kind() {
        ValueKind::Seq | ValueKind::Map | ValueKind::Iterable if depth < 32 => {
            let Ok(items) = v.try_iter() else {
                return true;
            };
            for item in items {
                if !fits(&item, left, depth + 1) {
                    return false;
                }
                if v.kind() == ValueKind::Map {
                    match v.get_item(&item) {
                        Ok(member) if !fits(&member, left, depth + 1) => return false,
                        _ => {}
                    }
                }
            }
            true
        }
        ValueKind::Seq | ValueKind::Map | ValueKind::Iterable => false,
        _ => true,
    }
}

/// A buffer that refuses to grow past [`MAX_BODY`], so that rendering stops there.
struct Capped(Vec<u8>);

impl std::io::Write for Capped {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.0.len() + buf.len() > MAX_BODY {
            return Err(std::io::Error::other("the body is too large"));
        }
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Where templates named by path are read from.
#[derive(Debug, Clone, Default)]
pub struct Templates {
    dir: Option<PathBuf>,
}

impl Templates {
    pub fn new(dir: Option<PathBuf>) -> Templates {
        Templates { dir }
    }

    /// Checks the form of a template path (relative, never `..`); the file itself is
    /// read when a body is rendered.
    pub fn check_path(path: &str) -> Result<(), TemplateError> {
        if Path::new(path)
            .components()
            .all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
        {
            Ok(())
        } else {
            Err(TemplateError::Outside(path.to_owned()))
        }
    }

    /// The text of the template at `path`, relative to the templates directory.
    pub fn read(&self, path: &str) -> Result<String, TemplateError> {
        Self::check_path(path)?;
        let dir = self
            .dir
            .as_ref()
            .ok_or_else(|| TemplateError::NoDirectory(path.to_owned()))?;
        let relative = Path::new(path);
        let read_error = |e: std::io::Error| TemplateError::Read {
            path: path.to_owned(),
            message: e.to_string(),
        };
        let root = dir.canonicalize().map_err(read_error)?;
        let full = root.join(relative).canonicalize().map_err(read_error)?;
        // A link inside the directory may still point out of it.
        if !full.starts_with(&root) {
            return Err(TemplateError::Outside(path.to_owned()));
        }
        std::fs::read_to_string(&full).map_err(read_error)
    }

    /// Renders `source` (named `name` in errors) with `context`, within [`FUEL`] steps
    /// and [`MAX_BODY`] bytes: templates are written by tenants, and one rendering must
    /// neither hold the events of others nor fill the store. The template is audited
    /// first (see [`Templates::check`]), so only filters make values, and each filter
    /// refuses a value of more than [`MAX_BODY`] bytes (see [`bounded`]).
    pub fn render(
        name: &str,
        source: &str,
        context: &impl Serialize,
    ) -> Result<String, TemplateError> {
        let render_error = |e: minijinja::Error| {
            let path = name.to_owned();
            if let Some(too_large) = source_of::<TooLarge>(&e) {
                return TemplateError::OverBudget {
                    path,
                    message: match e.line() {
                        Some(line) => format!("line {line}: {too_large}"),
                        None => too_large.to_string(),
                    },
                };
            }
            match e.kind() {
                minijinja::ErrorKind::OutOfFuel => TemplateError::OverBudget {
                    path,
                    message: format!(
                        "the template took more than {FUEL} steps to render; make it simpler"
                    ),
                },
                // The only write that fails is one past the cap.
                minijinja::ErrorKind::WriteFailure => TemplateError::OverBudget {
                    path,
                    message: format!("the rendered body is larger than {MAX_BODY} bytes"),
                },
                _ => TemplateError::Render {
                    path,
                    message: e.to_string(),
                },
            }
        };
        audit(source).map_err(|message| TemplateError::Render {
            path: name.to_owned(),
            message,
        })?;
        let mut env = Environment::new();
        // Undefined variables are errors, so a misspelt one shows when the hook is tested
        // rather than as an empty value in every call.
        env.set_undefined_behavior(minijinja::UndefinedBehavior::Strict);
        env.set_fuel(Some(FUEL));
        for (filter, builtin) in FILTERS {
            env.add_filter(*filter, bounded(filter, builtin()));
        }
        env.add_template("body", source).map_err(render_error)?;
        let mut out = Capped(Vec::new());
        env.get_template("body")
            .and_then(|t| t.render_captured_to(context, &mut out).map(|_| ()))
            .map_err(render_error)?;
        String::from_utf8(out.0).map_err(|e| TemplateError::Render {
            path: name.to_owned(),
            message: e.to_string(),
        })
    }

    /// Checks that `source` parses and keeps to what a body template may do, for
    /// load-time errors.
    pub fn check(name: &str, source: &str) -> Result<(), TemplateError> {
        audit(source).map_err(|message| TemplateError::Render {
            path: name.to_owned(),
            message,
        })
    }
}

/// The first error of type `T` in the chain of `e`'s sources.
fn source_of<T: std::error::Error + 'static>(e: &minijinja::Error) -> Option<&T> {
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        if let Some(found) = c.downcast_ref::<T>() {
            return Some(found);
        }
        cause = c.source();
    }
    None
}

/// Checks that `source` is a template whose every value stays about as small as the
/// event's: text, `{{ ... }}` and `{% if %}`, over variables, constants, comparisons and
/// the [`FILTERS`]. Anything that binds or builds a value (`set`, `with`, `for`, macros,
/// calls, list and map literals, and `~`, `+`, `*`, `**`) is refused with its place:
/// chained, such steps double a value each time, and memory would run out long before
/// the step budget.
fn audit(source: &str) -> Result<(), String> {
    if source.len() > MAX_SOURCE {
        return Err(format!(
            "the template is {} bytes; at most {MAX_SOURCE} are allowed",
            source.len()
        ));
    }
    let ast = minijinja::machinery::parse(source, "body", Default::default(), Default::default())
        .map_err(|e| e.to_string())?;
    statement(&ast)
}

/// Where `span` starts, as the errors say it.
fn at(span: Span) -> String {
    format!("line {}, column {}", span.start_line, span.start_col + 1)
}

fn refused(span: Span, what: &str) -> String {
    format!(
        "{}: {what} is not allowed in a body template (text, {{{{ ... }}}} and {{% if %}} over the event's variables are)",
        at(span)
    )
}

fn statement(stmt: &Stmt<'_>) -> Result<(), String> {
    match stmt {
        Stmt::Template(t) => t.children.iter().try_for_each(statement),
        Stmt::EmitExpr(e) => expression(&e.expr),
        Stmt::EmitRaw(_) => Ok(()),
        Stmt::IfCond(c) => {
            expression(&c.expr)?;
            c.true_body.iter().try_for_each(statement)?;
            c.false_body.iter().try_for_each(statement)
        }
        Stmt::ForLoop(s) => Err(refused(s.span(), "`for`")),
        Stmt::Set(s) => Err(refused(s.span(), "`set`")),
        Stmt::SetBlock(s) => Err(refused(s.span(), "`set`")),
        Stmt::WithBlock(s) => Err(refused(s.span(), "`with`")),
        Stmt::Macro(s) => Err(refused(s.span(), "`macro`")),
        Stmt::CallBlock(s) => Err(refused(s.span(), "`call`")),
        Stmt::FilterBlock(s) => Err(refused(s.span(), "a `filter` block")),
        Stmt::AutoEscape(s) => Err(refused(s.span(), "`autoescape`")),
        Stmt::Do(s) => Err(refused(s.span(), "`do`")),
        // Blocks, includes, imports and loop controls: nothing a body needs.
        _ => Err("only text, {{ ... }} and {% if %} are allowed in a body template".into()),
    }
}

fn expression(expr: &Expr<'_>) -> Result<(), String> {
    match expr {
        Expr::Var(_) | Expr::Const(_) => Ok(()),
        Expr::Slice(s) => {
            expression(&s.expr)?;
            for part in [&s.start, &s.stop, &s.step].into_iter().flatten() {
                expression(part)?;
            }
            Ok(())
        }
        Expr::UnaryOp(u) => expression(&u.expr),
        Expr::BinOp(b) => {
            let builds = match b.op {
                BinOpKind::Add => Some("`+`"),
                BinOpKind::Mul => Some("`*`"),
                BinOpKind::Pow => Some("`**`"),
                BinOpKind::Concat => Some("`~`"),
                _ => None,
            };
            if let Some(op) = builds {
                return Err(refused(
                    b.span(),
                    &format!("{op} (write the text around the values instead)"),
                ));
            }
            expression(&b.left)?;
            expression(&b.right)
        }
        Expr::Compare(c) => {
            expression(&c.expr)?;
            c.ops.iter().try_for_each(|op| expression(&op.expr))
        }
        Expr::IfExpr(i) => {
            expression(&i.test_expr)?;
            expression(&i.true_expr)?;
            i.false_expr.iter().try_for_each(expression)
        }
        Expr::Filter(f) => {
            if !FILTERS.iter().any(|(name, _)| *name == f.name) {
                return Err(refused(
                    f.span(),
                    &format!(
                        "the filter `{}` (the filters are {})",
                        f.name,
                        filter_names()
                    ),
                ));
            }
            if f.name == "tojson" && !f.args.is_empty() {
                return Err(refused(f.span(), "`tojson` with arguments"));
            }
            f.expr.iter().try_for_each(expression)?;
            arguments(&f.args)
        }
        Expr::Test(t) => {
            expression(&t.expr)?;
            arguments(&t.args)
        }
        Expr::GetAttr(g) => expression(&g.expr),
        Expr::GetItem(g) => {
            expression(&g.expr)?;
            expression(&g.subscript_expr)
        }
        Expr::Call(c) => Err(refused(c.span(), "a call")),
        Expr::List(l) => Err(refused(l.span(), "a list")),
        Expr::Map(m) => Err(refused(m.span(), "a map")),
    }
}

fn arguments(args: &[CallArg<'_>]) -> Result<(), String> {
    args.iter().try_for_each(|a| match a {
        CallArg::Pos(e) | CallArg::Kwarg(_, e) | CallArg::PosSplat(e) | CallArg::KwargSplat(e) => {
            expression(e)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_with_the_event() {
        let body = Templates::render(
            "t",
            r#"{"alert": "{{ event }}", "key": {{ key_id | tojson }}}"#,
            &serde_json::json!({"event": "auth_failure", "key_id": null}),
        )
        .unwrap();
        assert_eq!(body, r#"{"alert": "auth_failure", "key": null}"#);
        let e = Templates::render("t", "{{ nope }}", &serde_json::json!({})).unwrap_err();
        assert!(e.to_string().contains("undefined"), "{e}");
        assert!(Templates::check("t", "{% if %}").is_err());
    }

    #[test]
    fn a_rendering_has_a_size_cap() {
        let ctx = serde_json::json!({"message": "m".repeat(1000)});
        let big = "{{ message }}".repeat(70);
        let e = Templates::render("t", &big, &ctx).unwrap_err();
        assert!(matches!(e, TemplateError::OverBudget { .. }), "{e}");
        assert!(e.to_string().contains("larger than 65536 bytes"), "{e}");
        let fits = "{{ message }}".repeat(60);
        assert_eq!(Templates::render("t", &fits, &ctx).unwrap().len(), 60_000);
        let long = "x".repeat(MAX_SOURCE + 1);
        let e = Templates::check("t", &long).unwrap_err();
        assert!(e.to_string().contains("at most 65536"), "{e}");
    }

    /// Renders `source` over `ctx` and expects it stopped by the value bound, quickly.
    fn stopped_by_the_bound(source: &str, ctx: &serde_json::Value) -> String {
        let started = std::time::Instant::now();
        let e = Templates::render("t", source, ctx).unwrap_err();
        assert!(
            started.elapsed() < std::time::Duration::from_secs(5),
            "{source}"
        );
        assert!(
            matches!(e, TemplateError::OverBudget { .. }),
            "{source}: {e}"
        );
        let e = e.to_string();
        assert!(e.contains("larger than 65536 bytes"), "{source}: {e}");
        e
    }

    #[test]
    fn a_chain_of_filters_stops_at_the_value_bound() {
        // Each `tojson` doubles the backslashes before every quote: forty of them would
        // ask for terabytes, from a kilobyte, within a few hundred steps of fuel.
        let kib = serde_json::json!({"message": "\"<'&".repeat(256), "event": "auth_failure"});
        let e = stopped_by_the_bound(&format!("{{{{ message{} }}}}", "|tojson".repeat(40)), &kib);
        assert!(e.contains("the filter `tojson` made a value"), "{e}");
        assert!(e.contains("line 1"), "{e}");
        // Plain text grows too (each layer escapes the quotes of the one before).
        let plain = serde_json::json!({"message": "m"});
        stopped_by_the_bound(
            &format!("{{{{ message{} }}}}", "|tojson".repeat(40)),
            &plain,
        );
        // Escaping and converting in turn, and `default` handing on a grown value.
        stopped_by_the_bound(
            &format!("{{{{ message{} }}}}", "|escape|string|tojson".repeat(40)),
            &kib,
        );
        stopped_by_the_bound(
            &format!("{{{{ nope|default(message{}) }}}}", "|e|tojson".repeat(40)),
            &kib,
        );
        stopped_by_the_bound(
            &format!(
                "{{% if event %}}{{{{ message{}|length }}}}{{% endif %}}",
                "|tojson|upper|lower|title|trim".repeat(20)
            ),
            &kib,
        );
        // Upper case of some letters takes three times their bytes.
        let wide = serde_json::json!({"message": "\u{390}".repeat(12 * 1024)});
        let e = stopped_by_the_bound("{{ message|upper|length }}", &wide);
        assert!(e.contains("the filter `upper` made a value"), "{e}");
        // A value already past the bound is not taken by any filter.
        let big = serde_json::json!({"message": "m".repeat(MAX_BODY + 1)});
        let e = stopped_by_the_bound("{{ message|length }}", &big);
        assert!(e.contains("the filter `length` was given a value"), "{e}");
    }

    #[test]
    fn filters_within_the_bound_render_as_the_built_ins_do() {
        let ctx =
            serde_json::json!({"message": "<a href='x'>&</a> \u{390}", "n": -2.5, "key_id": null});
        let source = "{{ message|tojson }} {{ message|tojson|tojson }} {{ message|e }} \
            {{ message|upper }} {{ message|lower|title|capitalize }} {{ n|abs }} {{ n|round }} \
            {{ n|int }} {{ n|float }} {{ key_id|d('k', true) }} {{ nope|default('d') }} \
            {{ message|length }} {{ message|count }} {{ message|first }}{{ message|last }} \
            {{ ' x '|trim }} {{ n|string }} {{ 0|bool }} {{ message|escape|string|e }}";
        let body = Templates::render("t", source, &ctx).unwrap();
        let mut plain = Environment::new();
        plain.set_undefined_behavior(minijinja::UndefinedBehavior::Strict);
        let want = plain.render_str(source, &ctx).unwrap();
        assert_eq!(body, want);
        assert!(body.starts_with(r#""\u003ca href=\u0027x\u0027"#), "{body}");
        // Up to the bound, a filter's value is whole.
        let ctx = serde_json::json!({"message": "m".repeat(MAX_BODY - 2)});
        let body = Templates::render("t", "{{ message|tojson }}", &ctx).unwrap();
        assert_eq!(body.len(), MAX_BODY);
    }

    #[test]
    fn what_could_build_a_large_value_is_refused_with_its_place() {
        let ctx = serde_json::json!({"message": "m", "key_id": null});
        for (bad, says) in [
            // Each doubles a value per step: memory runs out within the step budget.
            ("{% set a = message %}{% set a = a ~ a %}{{ a }}", "`set`"),
            ("{{ message ~ message }}", "`~`"),
            ("{{ 'x' * 100000000 }}", "`*`"),
            ("{{ message + message }}", "`+`"),
            ("{{ 2 ** 64 }}", "`**`"),
            ("{{ 'x'|indent(100000000000) }}", "the filter `indent`"),
            (
                "{{ message|tojson(indent=100000000) }}",
                "`tojson` with arguments",
            ),
            ("{{ message|replace('m', 'mm') }}", "the filter `replace`"),
            ("{% for a in range(10000) %}{% endfor %}", "`for`"),
            ("{% with a = message %}{{ a }}{% endwith %}", "`with`"),
            ("{% macro f(a) %}{{ f(a) }}{% endmacro %}", "`macro`"),
            ("{{ range(10) }}", "a call"),
            ("{{ [message, message] }}", "a list"),
            ("{{ {'a': message} }}", "a map"),
            ("{% filter upper %}x{% endfilter %}", "a `filter` block"),
            ("{% if key_id %}{{ message ~ 'x' }}{% endif %}", "`~`"),
        ] {
            let e = Templates::check("template", bad).unwrap_err().to_string();
            assert!(e.contains(says), "{bad}: {e}");
            assert!(e.contains("line 1, column"), "{bad}: {e}");
            // Rendering audits too: a template that got in some other way is not run.
            let e = Templates::render("template", bad, &ctx)
                .unwrap_err()
                .to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
        let e = Templates::check("t", "x\n  {{ a ~ b }}")
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 2, column 6"), "{e}");
    }

    #[test]
    fn what_a_body_needs_is_allowed() {
        let ctx =
            serde_json::json!({"event": "auth_failure", "key_id": null, "path": "/a/b", "at": 5});
        let good = r#"{"e": {{ event|upper|tojson }}, "k": {{ key_id|default("none", true)|tojson }},
{% if key_id is none and at > 3 %}"late": true,{% elif not key_id %}"x": 1,{% else %}"y": 2,{% endif %}
"p": "{{ path[1:] }}", "n": {{ path|length }}, "h": "{{ at if at else 0 }}", "s": "{{ event|title }}"}"#;
        let body = Templates::render("t", good, &ctx).unwrap();
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["e"], "AUTH_FAILURE");
        assert_eq!(v["k"], "none");
        assert_eq!(v["late"], true);
        assert_eq!((v["p"].as_str(), v["n"].as_i64()), (Some("a/b"), Some(4)));
    }

    #[test]
    fn reads_only_inside_the_directory() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("sub/a.json"), "{{ event }}").unwrap();
        let t = Templates::new(Some(dir.path().to_owned()));
        assert_eq!(t.read("sub/a.json").unwrap(), "{{ event }}");
        assert_eq!(t.read("./sub/a.json").unwrap(), "{{ event }}");
        for bad in ["/etc/passwd", "../x", "sub/../../x"] {
            assert!(
                matches!(t.read(bad), Err(TemplateError::Outside(_))),
                "{bad}"
            );
        }
        #[cfg(unix)]
        {
            std::os::unix::fs::symlink("/etc", dir.path().join("out")).unwrap();
            assert!(matches!(
                t.read("out/hostname"),
                Err(TemplateError::Outside(_)) | Err(TemplateError::Read { .. })
            ));
        }
        assert!(matches!(t.read("missing"), Err(TemplateError::Read { .. })));
        assert!(matches!(
            Templates::default().read("a"),
            Err(TemplateError::NoDirectory(_))
        ));
    }
}
