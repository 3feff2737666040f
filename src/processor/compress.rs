//! `compress`: compresses each message's payload with `algorithm`. It shares its codecs
//! with the mapping language's `compress` method, so both give the same bytes.

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;

use super::BuildProcessor;
use crate::component::registry::Spec;
use crate::component::{
    BuildContext, BuildError, ComponentSpec, Example, Kind, ProcessError, Processor,
};
use crate::mapping::methods::encoding::compress_bytes;
use crate::message::Message;

/// The algorithms `compress` takes.
pub const ALGORITHMS: &[&str] = &["flate", "gzip", "lz4", "pgzip", "snappy", "zlib", "zstd"];

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CompressConfig {
    /// One of flate, gzip, lz4, pgzip, snappy, zlib, zstd.
    pub algorithm: String,
    /// Compression level for the gzip family, 0 to 9 (-1: the default).
    #[serde(default = "default_level")]
    pub level: i64,
}

fn default_level() -> i64 {
    -1
}

impl Spec for CompressConfig {
    const SPEC: ComponentSpec = ComponentSpec {
        name: "compress",
        kind: Kind::Processor,
        summary: "Compresses each message with the chosen algorithm.",
        examples: &[Example {
            title: "Gzip every message",
            yaml: "input:\n  stdin: {}\npipeline:\n  processors:\n    - compress: {algorithm: gzip, level: 9}\noutput:\n  stdout: {}\n",
        }],
    };
}

/// Refuses an algorithm outside `known`, naming the choices.
pub(crate) fn check_algorithm(
    cx: &BuildContext,
    algorithm: &str,
    known: &[&str],
) -> Result<(), BuildError> {
    if known.contains(&algorithm) {
        Ok(())
    } else {
        Err(cx.error(format!(
            "unknown algorithm `{algorithm}`, expected one of {}",
            known.join(", ")
        )))
    }
}

impl BuildProcessor for CompressConfig {
    fn build(&self, cx: &BuildContext) -> Result<Box<dyn Processor>, BuildError> {
        check_algorithm(cx, &self.algorithm, ALGORITHMS)?;
        if !(-1..=9).contains(&self.level) {
            return Err(cx.error(format!("`level` must be from -1 to 9, got {}", self.level)));
        }
        Ok(Box::new(Compress(self.clone())))
    }
}

pub struct Compress(CompressConfig);

#[async_trait]
impl Processor for Compress {
    async fn process_message(&self, msg: &mut Message) -> Result<bool, ProcessError> {
        let out = compress_bytes(&self.0.algorithm, msg.payload(), self.0.level)
            .map_err(|e| ProcessError::new(format!("compress: {e}")))?;
        msg.set_payload(out);
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mapping::methods::encoding::decompress_bytes;
    use crate::processor::chain::test_support::{batch, build, build_error};

    #[tokio::test]
    async fn every_algorithm_round_trips() {
        let text = "hello hello hello hello hello";
        for alg in ALGORITHMS {
            let p = build::<CompressConfig>(&format!("{{algorithm: {alg}}}"));
            let out = p.process(batch(&[text])).await;
            let m = &out[0][0];
            assert!(m.error().is_none(), "{alg}: {:?}", m.error());
            assert_ne!(m.payload().as_ref(), text.as_bytes(), "{alg}");
            assert_eq!(
                decompress_bytes(alg, m.payload()).unwrap(),
                text.as_bytes(),
                "{alg}"
            );
        }
    }

    #[tokio::test]
    async fn gzip_output_is_gzip() {
        let p = build::<CompressConfig>("{algorithm: gzip, level: 1}");
        let out = p.process(batch(&["abc"])).await;
        // The gzip magic number.
        assert_eq!(&out[0][0].payload()[..2], &[0x1f, 0x8b]);
    }

    #[test]
    fn bad_config_is_refused() {
        let e = build_error::<CompressConfig>("{algorithm: lzma}");
        assert!(e.contains("lzma") && e.contains("gzip"), "{e}");
        let e = build_error::<CompressConfig>("{algorithm: gzip, level: 12}");
        assert!(e.contains("level"), "{e}");
    }
}
