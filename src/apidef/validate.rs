//! Request validation against an operation's schemas: its path, query and header
//! parameters and its JSON request body.

use serde_json::{Map, Value};

/// Where a parameter is read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParamIn {
    Path,
    Query,
    Header,
}

impl ParamIn {
    fn as_str(self) -> &'static str {
        match self {
            ParamIn::Path => "path",
            ParamIn::Query => "query",
            ParamIn::Header => "header",
        }
    }
}

struct Param {
    name: String,
    location: ParamIn,
    required: bool,
    schema: Option<jsonschema::Validator>,
    /// The schema's `type`, to read a parameter's text as that type.
    ty: Option<String>,
}

/// The compiled checks of one operation.
pub struct RequestValidator {
    params: Vec<Param>,
    body_required: bool,
    /// Media type -> schema; a body of another type is refused when this is not empty.
    body: Vec<(String, Option<jsonschema::Validator>)>,
}

/// What a request carries that validation looks at.
pub struct RequestView<'a> {
    pub path_params: &'a [(String, String)],
    pub query: Option<&'a str>,
    pub headers: &'a http::HeaderMap,
    pub content_type: Option<&'a str>,
    pub body: &'a [u8],
}

impl RequestValidator {
    /// Compiles the schemas of `operation` (with the `parameters` of its path item),
    /// resolving `#/...` references in `root`. The error names the document path.
    pub fn compile(
        root: &Value,
        path_params: Option<&Value>,
        operation: &Value,
        at: &str,
    ) -> Result<Self, (String, String)> {
        let mut params = Vec::new();
        let lists = [
            (path_params, format!("{at}.parameters")),
            (operation.get("parameters"), format!("{at}.parameters")),
        ];
        for (list, list_at) in lists {
            let Some(list) = list else { continue };
            let list = resolve(root, list, 0).map_err(|e| (list_at.clone(), e))?;
            let Some(items) = list.as_array() else {
                return Err((list_at, "`parameters` is not a list".into()));
            };
            for (i, item) in items.iter().enumerate() {
                let item_at = format!("{list_at}[{i}]");
                let item = resolve(root, item, 0).map_err(|e| (item_at.clone(), e))?;
                let Some(name) = item.get("name").and_then(Value::as_str) else {
                    return Err((item_at, "a parameter has no `name`".into()));
                };
                let location = match item.get("in").and_then(Value::as_str) {
                    Some("path") => ParamIn::Path,
                    Some("query") => ParamIn::Query,
                    Some("header") => ParamIn::Header,
                    // Cookie parameters are not checked; the rest is an error.
                    Some("cookie") => continue,
                    other => {
                        return Err((
                            item_at,
                            format!("parameter `{name}` has a bad `in`: {other:?}"),
                        ))
                    }
                };
                let required = location == ParamIn::Path
                    || item
                        .get("required")
                        .and_then(Value::as_bool)
                        .unwrap_or(false);
                let (schema, ty) = match item.get("schema") {
                    Some(s) => {
                        let s = resolve(root, s, 0).map_err(|e| (item_at.clone(), e))?;
                        let ty = s.get("type").and_then(Value::as_str).map(str::to_owned);
                        (
                            Some(compile_schema(&s).map_err(|e| (item_at.clone(), e))?),
                            ty,
                        )
                    }
                    None => (None, None),
                };
                // An operation's parameter replaces the path item's of the same name.
                params.retain(|p: &Param| !(p.name == name && p.location == location));
                params.push(Param {
                    name: name.to_owned(),
                    location,
                    required,
                    schema,
                    ty,
                });
            }
        }
        let mut body = Vec::new();
        let mut body_required = false;
        if let Some(rb) = operation.get("requestBody") {
            let rb_at = format!("{at}.requestBody");
            let rb = resolve(root, rb, 0).map_err(|e| (rb_at.clone(), e))?;
            body_required = rb.get("required").and_then(Value::as_bool).unwrap_or(false);
            if let Some(content) = rb.get("content").and_then(Value::as_object) {
                for (media, spec) in content {
                    let schema = match spec.get("schema") {
                        Some(s) if media_is_json(media) => {
                            let s = resolve(root, s, 0).map_err(|e| (rb_at.clone(), e))?;
                            Some(compile_schema(&s).map_err(|e| (rb_at.clone(), e))?)
                        }
                        _ => None,
                    };
                    body.push((media.to_ascii_lowercase(), schema));
                }
            }
        }
        Ok(RequestValidator {
            params,
            body_required,
            body,
        })
    }

    /// Every problem with the request, or none.
    pub fn check(&self, req: &RequestView<'_>) -> Vec<String> {
        let mut problems = Vec::new();
        let query: Vec<(String, String)> = req
            .query
            .map(|q| {
                url::form_urlencoded::parse(q.as_bytes())
                    .into_owned()
                    .collect()
            })
            .unwrap_or_default();
        for p in &self.params {
            let value: Option<String> = match p.location {
                ParamIn::Path => req
                    .path_params
                    .iter()
                    .find(|(n, _)| *n == p.name)
                    .map(|(_, v)| v.clone()),
                ParamIn::Query => query
                    .iter()
                    .find(|(n, _)| *n == p.name)
                    .map(|(_, v)| v.clone()),
                ParamIn::Header => req
                    .headers
                    .get(&p.name)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned),
            };
            let Some(value) = value else {
                if p.required {
                    problems.push(format!(
                        "{} parameter `{}` is required",
                        p.location.as_str(),
                        p.name
                    ));
                }
                continue;
            };
            if let Some(schema) = &p.schema {
                let typed = typed_param(&value, p.ty.as_deref());
                let first = schema.iter_errors(&typed).next().map(|e| e.to_string());
                if let Some(e) = first {
                    problems.push(format!(
                        "{} parameter `{}`: {e}",
                        p.location.as_str(),
                        p.name
                    ));
                }
            }
        }
        if req.body.is_empty() {
            if self.body_required {
                problems.push("a request body is required".into());
            }
            return problems;
        }
        if self.body.is_empty() {
            return problems;
        }
        let media = req
            .content_type
            .and_then(|c| c.split(';').next())
            .map(|c| c.trim().to_ascii_lowercase())
            .unwrap_or_default();
        let Some((_, schema)) = self.body.iter().find(|(m, _)| media_matches(m, &media)) else {
            let allowed: Vec<&str> = self.body.iter().map(|(m, _)| m.as_str()).collect();
            problems.push(format!(
                "content type `{media}` is not accepted (expected {})",
                allowed.join(", ")
            ));
            return problems;
        };
        if let Some(schema) = schema {
            match serde_json::from_slice::<Value>(req.body) {
                Ok(doc) => problems.extend(schema.iter_errors(&doc).map(|e| {
                    let at = e.instance_path().as_str().to_owned();
                    if at.is_empty() {
                        format!("body: {e}")
                    } else {
                        format!("body{at}: {e}")
                    }
                })),
                Err(e) => problems.push(format!("the body is not JSON: {e}")),
            }
        }
        problems
    }
}

fn media_is_json(media: &str) -> bool {
    let m = media.to_ascii_lowercase();
    m == "application/json" || m.ends_with("+json") || m == "*/*"
}

fn media_matches(pattern: &str, media: &str) -> bool {
    if pattern == "*/*" || pattern == media {
        return true;
    }
    match pattern.strip_suffix("/*") {
        Some(prefix) => media.split('/').next() == Some(prefix),
        None => false,
    }
}

/// A parameter's text read as its schema's type, so `?limit=10` meets `type: integer`.
fn typed_param(text: &str, ty: Option<&str>) -> Value {
    match ty {
        Some("integer") => text
            .parse::<i64>()
            .map(Value::from)
            .unwrap_or_else(|_| Value::String(text.into())),
        Some("number") => text
            .parse::<f64>()
            .ok()
            .and_then(|f| serde_json::Number::from_f64(f).map(Value::Number))
            .unwrap_or_else(|| Value::String(text.into())),
        Some("boolean") => match text {
            "true" => Value::Bool(true),
            "false" => Value::Bool(false),
            _ => Value::String(text.into()),
        },
        Some("array") => Value::Array(
            text.split(',')
                .map(|s| Value::String(s.to_owned()))
                .collect(),
        ),
        _ => Value::String(text.into()),
    }
}

fn compile_schema(schema: &Value) -> Result<jsonschema::Validator, String> {
    let schema = openapi_to_json_schema(schema.clone());
    jsonschema::validator_for(&schema).map_err(|e| format!("invalid schema: {e}"))
}

/// OpenAPI 3.0's `nullable: true` is JSON Schema's `type: [T, "null"]`.
fn openapi_to_json_schema(mut schema: Value) -> Value {
    match &mut schema {
        Value::Object(map) => {
            if map.remove("nullable") == Some(Value::Bool(true)) {
                if let Some(Value::String(t)) = map.get("type").cloned() {
                    map.insert(
                        "type".into(),
                        Value::Array(vec![Value::String(t), Value::String("null".into())]),
                    );
                }
            }
            let keys: Vec<String> = map.keys().cloned().collect();
            for k in keys {
                if let Some(v) = map.remove(&k) {
                    map.insert(k, openapi_to_json_schema(v));
                }
            }
        }
        Value::Array(items) => {
            for item in items.iter_mut() {
                *item = openapi_to_json_schema(item.take());
            }
        }
        _ => {}
    }
    schema
}

/// Bounds `$ref` chains, so a self-referencing schema cannot recurse forever.
const MAX_REF_DEPTH: usize = 32;

/// `value` with every local `$ref` (`#/components/schemas/Pet`) replaced by what it
/// points to.
pub fn resolve(root: &Value, value: &Value, depth: usize) -> Result<Value, String> {
    if depth > MAX_REF_DEPTH {
        return Err("references nest too deep (a schema refers to itself?)".into());
    }
    match value {
        Value::Object(map) => {
            if let Some(Value::String(target)) = map.get("$ref") {
                let Some(pointer) = target.strip_prefix('#') else {
                    return Err(format!(
                        "`$ref: {target}`: only references inside the document are supported"
                    ));
                };
                let found = root
                    .pointer(pointer)
                    .ok_or_else(|| format!("`$ref: {target}` points at nothing"))?;
                return resolve(root, found, depth + 1);
            }
            let mut out = Map::with_capacity(map.len());
            for (k, v) in map {
                out.insert(k.clone(), resolve(root, v, depth + 1)?);
            }
            Ok(Value::Object(out))
        }
        Value::Array(items) => items
            .iter()
            .map(|v| resolve(root, v, depth + 1))
            .collect::<Result<Vec<_>, _>>()
            .map(Value::Array),
        other => Ok(other.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn doc() -> Value {
        json!({
            "components": {"schemas": {"Pet": {
                "type": "object",
                "required": ["name"],
                "properties": {"name": {"type": "string"}, "age": {"type": "integer", "nullable": true}}
            }}}
        })
    }

    fn op() -> Value {
        json!({
            "parameters": [
                {"name": "limit", "in": "query", "schema": {"type": "integer", "maximum": 100}},
                {"name": "X-Trace", "in": "header", "required": true}
            ],
            "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Pet"}}}}
        })
    }

    fn view<'a>(
        query: Option<&'a str>,
        headers: &'a http::HeaderMap,
        body: &'a [u8],
    ) -> RequestView<'a> {
        RequestView {
            path_params: &[],
            query,
            headers,
            content_type: Some("application/json"),
            body,
        }
    }

    #[test]
    fn a_valid_request_passes() {
        let v = RequestValidator::compile(&doc(), None, &op(), "paths./pets.post").unwrap();
        let mut h = http::HeaderMap::new();
        h.insert("x-trace", "1".parse().unwrap());
        let body = br#"{"name": "rex", "age": null}"#;
        assert!(v.check(&view(Some("limit=10"), &h, body)).is_empty());
    }

    #[test]
    fn each_problem_is_named() {
        let v = RequestValidator::compile(&doc(), None, &op(), "paths./pets.post").unwrap();
        let h = http::HeaderMap::new();
        let problems = v.check(&view(Some("limit=500"), &h, br#"{"age": "x"}"#));
        let text = problems.join("\n");
        assert!(text.contains("query parameter `limit`"), "{text}");
        assert!(
            text.contains("header parameter `X-Trace` is required"),
            "{text}"
        );
        assert!(text.contains("body"), "{text}");
        let problems = v.check(&view(None, &h, b"not json"));
        assert!(
            problems.iter().any(|p| p.contains("not JSON")),
            "{problems:?}"
        );
        let problems = v.check(&view(None, &h, b""));
        assert!(problems.iter().any(|p| p.contains("body is required")));
    }

    #[test]
    fn bad_references_are_errors() {
        let op = json!({"requestBody": {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/Nope"}}}}});
        let e = RequestValidator::compile(&doc(), None, &op, "paths./x.post")
            .err()
            .unwrap();
        assert!(e.1.contains("points at nothing"));
        let looped = json!({"components": {"schemas": {"A": {"$ref": "#/components/schemas/A"}}}});
        let op = json!({"requestBody": {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/A"}}}}});
        assert!(RequestValidator::compile(&looped, None, &op, "p").is_err());
    }
}
