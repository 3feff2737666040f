//! Webhook body templates, rendered with minijinja (Jinja2 syntax: `{{ event }}`,
//! `{% if key_id %}...{% endif %}`, `{{ message | tojson }}`).
//!
//! A template named by path is read from the templates directory the operator
//! configured, and only from there: absolute paths, `..` and links out of the directory
//! are refused, so a webhook written through the API cannot read the host's files.

use std::path::{Component, Path, PathBuf};

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
    /// neither hold the events of others nor fill the store.
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

    /// Checks that `source` parses, for load-time errors.
    pub fn check(name: &str, source: &str) -> Result<(), TemplateError> {
        let mut env = Environment::new();
        env.add_template("body", source)
            .map(|_| ())
            .map_err(|e| TemplateError::Render {
                path: name.to_owned(),
                message: e.to_string(),
            })
    }
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
    fn a_rendering_has_a_step_budget_and_a_size_cap() {
        let ctx = serde_json::json!({});
        let slow = "{% for a in range(10000) %}{% for b in range(10000) %}{% endfor %}{% endfor %}";
        let e = Templates::render("t", slow, &ctx).unwrap_err();
        assert!(matches!(e, TemplateError::OverBudget { .. }), "{e}");
        assert!(e.to_string().contains("steps"), "{e}");
        let big = "{% for a in range(100) %}{{ 'x' * 1000 }}{% endfor %}";
        let e = Templates::render("t", big, &ctx).unwrap_err();
        assert!(e.to_string().contains("larger than 65536 bytes"), "{e}");
        let fits = "{% for a in range(60) %}{{ 'x' * 1000 }}{% endfor %}";
        assert_eq!(Templates::render("t", fits, &ctx).unwrap().len(), 60_000);
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
