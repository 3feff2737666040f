//! OpenAPI path templates (`/pets/{petId}`) and matching request paths against them.

/// One segment of a template.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    Literal(String),
    Param(String),
}

/// A path template from the document's `paths`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathTemplate {
    text: String,
    segments: Vec<Segment>,
}

impl PathTemplate {
    pub fn parse(text: &str) -> Result<Self, String> {
        if !text.starts_with('/') {
            return Err(format!("path `{text}` does not start with `/`"));
        }
        let mut segments = Vec::new();
        for part in text.split('/').skip(1) {
            if let Some(inner) = part.strip_prefix('{').and_then(|p| p.strip_suffix('}')) {
                if inner.is_empty() || inner.contains(['{', '}']) {
                    return Err(format!("path `{text}` has a bad parameter `{part}`"));
                }
                segments.push(Segment::Param(inner.to_owned()));
            } else if part.contains(['{', '}']) {
                // `/files/{name}.json` style partial segments are rare; refusing them is
                // clearer than matching them wrongly.
                return Err(format!(
                    "path `{text}`: a parameter must fill a whole segment (`{part}`)"
                ));
            } else {
                segments.push(Segment::Literal(part.to_owned()));
            }
        }
        Ok(PathTemplate {
            text: text.to_owned(),
            segments,
        })
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The parameters of `path` when it matches, else `None`. The score ranks matches:
    /// more literal segments win, so `/pets/mine` beats `/pets/{id}`.
    pub fn matches(&self, path: &str) -> Option<(usize, Vec<(String, String)>)> {
        let path = if path.is_empty() { "/" } else { path };
        let parts = path.split('/').skip(1);
        let mut params = Vec::new();
        let mut literal = 0;
        let mut count = 0;
        for (i, part) in parts.enumerate() {
            let segment = self.segments.get(i)?;
            count += 1;
            match segment {
                Segment::Literal(l) if l == part => literal += 1,
                Segment::Literal(_) => return None,
                Segment::Param(name) if !part.is_empty() => {
                    let value = percent_encoding::percent_decode_str(part)
                        .decode_utf8_lossy()
                        .into_owned();
                    params.push((name.clone(), value));
                }
                Segment::Param(_) => return None,
            }
        }
        (count == self.segments.len()).then_some((literal, params))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literal_and_parameter_segments() {
        let t = PathTemplate::parse("/pets/{petId}").unwrap();
        let (score, params) = t.matches("/pets/42").unwrap();
        assert_eq!(score, 1);
        assert_eq!(params, vec![("petId".into(), "42".into())]);
        assert!(t.matches("/pets").is_none());
        assert!(t.matches("/pets/").is_none());
        assert!(t.matches("/pets/1/2").is_none());
        assert!(t.matches("/dogs/1").is_none());
        let root = PathTemplate::parse("/").unwrap();
        assert!(root.matches("/").is_some());
        assert!(root.matches("").is_some());
        assert!(root.matches("/x").is_none());
    }

    #[test]
    fn parameters_are_decoded() {
        let t = PathTemplate::parse("/files/{name}").unwrap();
        let (_, params) = t.matches("/files/a%20b").unwrap();
        assert_eq!(params[0].1, "a b");
    }

    #[test]
    fn bad_templates_are_refused() {
        assert!(PathTemplate::parse("pets").is_err());
        assert!(PathTemplate::parse("/pets/{}").is_err());
        assert!(PathTemplate::parse("/files/{name}.json").is_err());
    }
}
