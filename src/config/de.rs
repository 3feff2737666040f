//! A serde deserializer over [`Node`] trees that reports each error where it happened.
//!
//! Every error raised while deserializing a node is stamped, once, with that node's
//! position and document path; the innermost node stamps first, so an unknown key is
//! reported at the key and a bad value at the value.

use std::fmt;

use serde::de::{self, DeserializeSeed, IntoDeserializer, Visitor};

use super::error::{suggest_from_serde, ConfigError, Location};
use super::yaml::{Document, Mark, Node, NodeKind};

/// An error raised inside the deserializer; located on its way out.
#[derive(Debug)]
pub struct DeError {
    message: String,
    at: Option<(String, Mark)>,
}

impl fmt::Display for DeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for DeError {}

impl de::Error for DeError {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        DeError {
            message: msg.to_string(),
            at: None,
        }
    }
}

impl DeError {
    pub fn into_config_error(self, doc: &Document) -> ConfigError {
        let suggestion = suggest_from_serde(&self.message);
        let (path, mark) = self.at.unwrap_or_default();
        ConfigError {
            location: Some(Location {
                file: doc.file.clone(),
                path,
                line: mark.line,
                col: mark.col,
            }),
            message: self.message,
            suggestion,
        }
    }
}

/// Deserializes `T` from `node`, which sits at `path` in `doc`.
pub fn from_node<T: de::DeserializeOwned>(
    doc: &Document,
    node: &Node,
    path: &str,
) -> Result<T, ConfigError> {
    T::deserialize(NodeDe::new(node, path.to_owned()))
        .map_err(|e| locate(e, path, node.mark).into_config_error(doc))
}

/// The deserializer for one node.
pub struct NodeDe<'a> {
    node: &'a Node,
    path: String,
}

impl<'a> NodeDe<'a> {
    pub fn new(node: &'a Node, path: String) -> Self {
        NodeDe { node, path }
    }

    fn locate(&self, mut e: DeError) -> DeError {
        if e.at.is_none() {
            e.at = Some((self.path.clone(), self.node.mark));
        }
        e
    }

    fn scalar(&self) -> Result<(&'a str, bool), DeError> {
        match &self.node.kind {
            NodeKind::Scalar { value, plain } => Ok((value, *plain)),
            _ => Err(de::Error::custom(format!(
                "expected a value, found {}",
                self.node.describe()
            ))),
        }
    }

    fn invalid(&self, expected: &str) -> DeError {
        let found = match &self.node.kind {
            NodeKind::Scalar { value, .. } if !self.node.is_null() => format!("`{value}`"),
            _ => self.node.describe().to_owned(),
        };
        de::Error::custom(format!("expected {expected}, found {found}"))
    }

    fn parse_num<T: std::str::FromStr>(&self, what: &str) -> Result<T, DeError> {
        let (s, _) = self.scalar()?;
        let s = s.trim().replace('_', "");
        s.parse::<T>().map_err(|_| self.invalid(what))
    }
}

macro_rules! number {
    ($($method:ident $visit:ident $ty:ty => $what:literal),* $(,)?) => {$(
        fn $method<V: Visitor<'de>>(self, v: V) -> Result<V::Value, DeError> {
            let n: $ty = self.parse_num($what).map_err(|e| self.locate(e))?;
            v.$visit(n).map_err(|e| self.locate(e))
        }
    )*};
}

impl<'de> de::Deserializer<'de> for NodeDe<'_> {
    type Error = DeError;

    fn deserialize_any<V: Visitor<'de>>(self, v: V) -> Result<V::Value, DeError> {
        let r = match &self.node.kind {
            NodeKind::Seq(_) => return self.deserialize_seq(v),
            NodeKind::Map(_) => return self.deserialize_map(v),
            NodeKind::Scalar { value, plain } => {
                if !*plain {
                    v.visit_str(value)
                } else if self.node.is_null() {
                    v.visit_unit()
                } else if let Some(b) = parse_bool(value) {
                    v.visit_bool(b)
                } else if let Ok(i) = value.parse::<i64>() {
                    v.visit_i64(i)
                } else if let Ok(f) = value.parse::<f64>() {
                    v.visit_f64(f)
                } else {
                    v.visit_str(value)
                }
            }
        };
        r.map_err(|e| self.locate(e))
    }

    fn deserialize_bool<V: Visitor<'de>>(self, v: V) -> Result<V::Value, DeError> {
        let (s, _) = self.scalar().map_err(|e| self.locate(e))?;
        match parse_bool(s) {
            Some(b) => v.visit_bool(b).map_err(|e| self.locate(e)),
            None => Err(self.locate(self.invalid("true or false"))),
        }
    }

    number! {
        deserialize_i8 visit_i8 i8 => "an integer",
        deserialize_i16 visit_i16 i16 => "an integer",
        deserialize_i32 visit_i32 i32 => "an integer",
        deserialize_i64 visit_i64 i64 => "an integer",
        deserialize_u8 visit_u8 u8 => "a non-negative integer",
        deserialize_u16 visit_u16 u16 => "a non-negative integer",
        deserialize_u32 visit_u32 u32 => "a non-negative integer",
        deserialize_u64 visit_u64 u64 => "a non-negative integer",
        deserialize_f32 visit_f32 f32 => "a number",
        deserialize_f64 visit_f64 f64 => "a number",
    }

    fn deserialize_char<V: Visitor<'de>>(self, v: V) -> Result<V::Value, DeError> {
        self.deserialize_str(v)
    }

    fn deserialize_str<V: Visitor<'de>>(self, v: V) -> Result<V::Value, DeError> {
        match self.scalar() {
            Ok((s, _)) => v.visit_str(s).map_err(|e| self.locate(e)),
            Err(_) => Err(self.locate(self.invalid("a string"))),
        }
    }

    fn deserialize_string<V: Visitor<'de>>(self, v: V) -> Result<V::Value, DeError> {
        self.deserialize_str(v)
    }

    fn deserialize_bytes<V: Visitor<'de>>(self, v: V) -> Result<V::Value, DeError> {
        self.deserialize_str(v)
    }

    fn deserialize_byte_buf<V: Visitor<'de>>(self, v: V) -> Result<V::Value, DeError> {
        self.deserialize_str(v)
    }

    fn deserialize_option<V: Visitor<'de>>(self, v: V) -> Result<V::Value, DeError> {
        if self.node.is_null() {
            v.visit_none().map_err(|e| self.locate(e))
        } else {
            v.visit_some(NodeDe::new(self.node, self.path.clone()))
        }
    }

    fn deserialize_unit<V: Visitor<'de>>(self, v: V) -> Result<V::Value, DeError> {
        v.visit_unit().map_err(|e| self.locate(e))
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        v: V,
    ) -> Result<V::Value, DeError> {
        self.deserialize_unit(v)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        v: V,
    ) -> Result<V::Value, DeError> {
        v.visit_newtype_struct(NodeDe::new(self.node, self.path.clone()))
            .map_err(|e| self.locate(e))
    }

    fn deserialize_seq<V: Visitor<'de>>(self, v: V) -> Result<V::Value, DeError> {
        match &self.node.kind {
            NodeKind::Seq(items) => v
                .visit_seq(SeqDe {
                    items: items.iter(),
                    path: &self.path,
                    index: 0,
                })
                .map_err(|e| self.locate(e)),
            _ if self.node.is_null() => v
                .visit_seq(SeqDe {
                    items: [].iter(),
                    path: &self.path,
                    index: 0,
                })
                .map_err(|e| self.locate(e)),
            _ => Err(self.locate(self.invalid("a sequence"))),
        }
    }

    fn deserialize_tuple<V: Visitor<'de>>(self, _len: usize, v: V) -> Result<V::Value, DeError> {
        self.deserialize_seq(v)
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _len: usize,
        v: V,
    ) -> Result<V::Value, DeError> {
        self.deserialize_seq(v)
    }

    fn deserialize_map<V: Visitor<'de>>(self, v: V) -> Result<V::Value, DeError> {
        match &self.node.kind {
            NodeKind::Map(entries) => v
                .visit_map(MapDe {
                    entries: entries.iter(),
                    path: &self.path,
                    value: None,
                })
                .map_err(|e| self.locate(e)),
            // `stdin:` with nothing after it means "all defaults".
            _ if self.node.is_null() => v
                .visit_map(MapDe {
                    entries: [].iter(),
                    path: &self.path,
                    value: None,
                })
                .map_err(|e| self.locate(e)),
            _ => Err(self.locate(self.invalid("a mapping"))),
        }
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        v: V,
    ) -> Result<V::Value, DeError> {
        self.deserialize_map(v)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        v: V,
    ) -> Result<V::Value, DeError> {
        match &self.node.kind {
            NodeKind::Scalar { .. } => v
                .visit_enum(EnumDe {
                    tag: self.node,
                    value: None,
                    path: self.path.clone(),
                })
                .map_err(|e| self.locate(e)),
            NodeKind::Map(entries) if entries.len() == 1 => {
                let (k, val) = &entries[0];
                let path = join(&self.path, k.as_str().unwrap_or("?"));
                v.visit_enum(EnumDe {
                    tag: k,
                    value: Some(val),
                    path,
                })
                .map_err(|e| self.locate(e))
            }
            _ => Err(self.locate(self.invalid("a name or a mapping with one key"))),
        }
    }

    fn deserialize_identifier<V: Visitor<'de>>(self, v: V) -> Result<V::Value, DeError> {
        self.deserialize_str(v)
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, v: V) -> Result<V::Value, DeError> {
        v.visit_unit()
    }
}

fn locate(mut e: DeError, path: &str, mark: Mark) -> DeError {
    if e.at.is_none() {
        e.at = Some((path.to_owned(), mark));
    }
    e
}

fn parse_bool(s: &str) -> Option<bool> {
    match s {
        "true" | "True" | "TRUE" => Some(true),
        "false" | "False" | "FALSE" => Some(false),
        _ => None,
    }
}

/// `parent.key`, or `key` at the top.
pub fn join(parent: &str, key: &str) -> String {
    if parent.is_empty() {
        key.to_owned()
    } else {
        format!("{parent}.{key}")
    }
}

struct SeqDe<'a, I> {
    items: I,
    path: &'a str,
    index: usize,
}

impl<'de, 'a, I: Iterator<Item = &'a Node>> de::SeqAccess<'de> for SeqDe<'a, I> {
    type Error = DeError;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, DeError> {
        let Some(item) = self.items.next() else {
            return Ok(None);
        };
        let path = format!("{}[{}]", self.path, self.index);
        self.index += 1;
        // Errors raised after the node was read (a value that fails to parse) belong here.
        seed.deserialize(NodeDe::new(item, path.clone()))
            .map(Some)
            .map_err(|e| locate(e, &path, item.mark))
    }
}

struct MapDe<'a, I> {
    entries: I,
    path: &'a str,
    value: Option<(&'a Node, String)>,
}

impl<'de, 'a, I: Iterator<Item = &'a (Node, Node)>> de::MapAccess<'de> for MapDe<'a, I> {
    type Error = DeError;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, DeError> {
        let Some((k, v)) = self.entries.next() else {
            return Ok(None);
        };
        let path = join(self.path, k.as_str().unwrap_or("?"));
        let key = seed
            .deserialize(NodeDe::new(k, path.clone()))
            .map_err(|e| locate(e, &path, k.mark))?;
        self.value = Some((v, path));
        Ok(Some(key))
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, DeError> {
        match self.value.take() {
            Some((node, path)) => seed
                .deserialize(NodeDe::new(node, path.clone()))
                .map_err(|e| locate(e, &path, node.mark)),
            None => Err(de::Error::custom("value requested before its key")),
        }
    }
}

struct EnumDe<'a> {
    tag: &'a Node,
    value: Option<&'a Node>,
    path: String,
}

impl<'de, 'a> de::EnumAccess<'de> for EnumDe<'a> {
    type Error = DeError;
    type Variant = VariantDe<'a>;

    fn variant_seed<S: DeserializeSeed<'de>>(
        self,
        seed: S,
    ) -> Result<(S::Value, VariantDe<'a>), DeError> {
        let tag = seed.deserialize(NodeDe::new(self.tag, self.path.clone()))?;
        Ok((
            tag,
            VariantDe {
                value: self.value,
                path: self.path,
            },
        ))
    }
}

struct VariantDe<'a> {
    value: Option<&'a Node>,
    path: String,
}

impl<'de> de::VariantAccess<'de> for VariantDe<'_> {
    type Error = DeError;

    fn unit_variant(self) -> Result<(), DeError> {
        match self.value {
            Some(v) if !v.is_null() => Err(de::Error::custom("this option takes no value")),
            _ => Ok(()),
        }
    }

    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<T::Value, DeError> {
        let null = Node::scalar("");
        seed.deserialize(NodeDe::new(self.value.unwrap_or(&null), self.path))
    }

    fn tuple_variant<V: Visitor<'de>>(self, _len: usize, v: V) -> Result<V::Value, DeError> {
        let null = Node::scalar("");
        de::Deserializer::deserialize_seq(NodeDe::new(self.value.unwrap_or(&null), self.path), v)
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        _fields: &'static [&'static str],
        v: V,
    ) -> Result<V::Value, DeError> {
        let null = Node::scalar("");
        de::Deserializer::deserialize_map(NodeDe::new(self.value.unwrap_or(&null), self.path), v)
    }
}

impl<'a> IntoDeserializer<'_, DeError> for NodeDe<'a> {
    type Deserializer = Self;
    fn into_deserializer(self) -> Self {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Inner {
        count: u32,
        #[serde(default)]
        name: Option<String>,
    }

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Outer {
        inner: Inner,
        #[serde(default)]
        list: Vec<Inner>,
        #[serde(default)]
        flag: bool,
        #[serde(default)]
        mode: Option<Mode>,
    }

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(rename_all = "snake_case")]
    enum Mode {
        Fast,
        Tuned { level: u8 },
    }

    fn load<T: de::DeserializeOwned>(text: &str) -> Result<T, ConfigError> {
        let doc = super::super::yaml::parse("t.yaml", text, &|_| None).unwrap();
        from_node(&doc, &doc.root, "")
    }

    #[test]
    fn deserializes_nested_values() {
        let o: Outer = load(
            "inner: {count: 3}\nlist:\n  - count: 1\n    name: x\nflag: true\nmode: {tuned: {level: 2}}\n",
        )
        .unwrap();
        assert_eq!(o.inner.count, 3);
        assert_eq!(o.list[0].name.as_deref(), Some("x"));
        assert!(o.flag);
        assert_eq!(o.mode, Some(Mode::Tuned { level: 2 }));
        let o: Outer = load("inner: {count: 3}\nmode: fast\n").unwrap();
        assert_eq!(o.mode, Some(Mode::Fast));
    }

    #[test]
    fn unknown_key_is_reported_at_the_key_with_a_suggestion() {
        let e = load::<Outer>("inner:\n  count: 3\n  nmae: x\n").unwrap_err();
        let loc = e.location.clone().unwrap();
        assert_eq!((loc.line, loc.col, loc.path.as_str()), (3, 3, "inner.nmae"));
        assert_eq!(e.suggestion.as_deref(), Some("name"));
    }

    #[test]
    fn wrong_type_is_reported_at_the_value() {
        let e = load::<Outer>("inner: {count: 3}\nlist:\n  - count: lots\n").unwrap_err();
        let loc = e.location.clone().unwrap();
        assert_eq!((loc.line, loc.path.as_str()), (3, "list[0].count"));
        assert!(e.message.contains("`lots`"), "{}", e.message);
    }

    #[test]
    fn missing_field_is_reported_at_the_mapping() {
        let e = load::<Outer>("inner:\n  name: x\n").unwrap_err();
        assert!(e.message.contains("missing field `count`"));
        assert_eq!(e.location.unwrap().path, "inner");
    }

    #[test]
    fn quoted_numbers_still_fill_number_fields() {
        let o: Outer = load("inner: {count: '7'}\n").unwrap();
        assert_eq!(o.inner.count, 7);
    }
}
