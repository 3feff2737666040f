//! Webhook body templates, rendered with minijinja (Jinja2 syntax: `{{ event }}`,
//! `{% if key_id %}...{% endif %}`, `{{ message | tojson }}`).
//!
//! A template named by path is read from the templates directory the operator
//! configured, and only from there: absolute paths, `..` and links out of the directory
//! are refused, so a webhook written through the API cannot read the host's files.

use std::path::{Component, Path, PathBuf};

use minijinja::machinery::ast::{BinOpKind, CallArg, Expr, Stmt};
use minijinja::machinery::Span;
use minijinja::Environment;
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
    /// It took more steps than [`FUEL`] or made more than [`MAX_BODY`] bytes.
    #[error("template `{path}`: {message}")]
    OverBudget { path: String, message: String },
}

/// The steps (minijinja's fuel: about one per instruction) one rendering may take.
pub const FUEL: u64 = 100_000;

/// The most bytes one rendered body may have.
pub const MAX_BODY: usize = 64 * 1024;

/// The longest template source.
pub const MAX_SOURCE: usize = 64 * 1024;

/// The filters a template may use: none of them makes a value much larger than what it
/// is given, and none takes a size (`indent`, `center`, `tojson(indent=...)` could ask
/// for gigabytes in one step, which no step budget would stop).
const FILTERS: &[&str] = &[
    "tojson",
    "default",
    "d",
    "upper",
    "lower",
    "title",
    "capitalize",
    "trim",
    "length",
    "count",
    "abs",
    "int",
    "float",
    "round",
    "escape",
    "e",
    "string",
    "bool",
    "first",
    "last",
];

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
    /// first (see [`Templates::check`]), so no step can build a large value.
    pub fn render(
        name: &str,
        source: &str,
        context: &impl Serialize,
    ) -> Result<String, TemplateError> {
        let render_error = |e: minijinja::Error| {
            let path = name.to_owned();
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
            if !FILTERS.contains(&f.name) {
                return Err(refused(
                    f.span(),
                    &format!(
                        "the filter `{}` (the filters are {})",
                        f.name,
                        FILTERS.join(", ")
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
