//! `decompress`: decompresses each message's payload with `algorithm`. A message that
//! does not decompress keeps its payload and is marked with the error. Output stops at
//! 256 MiB, so a small hostile payload cannot exhaust memory.

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;

use super::compress::check_algorithm;
use super::BuildProcessor;
use crate::component::registry::Spec;
use crate::component::{
    BuildContext, BuildError, ComponentSpec, Example, Kind, ProcessError, Processor,
};
use crate::mapping::methods::encoding::decompress_bytes;
use crate::message::Message;

/// The algorithms `decompress` takes.
pub const ALGORITHMS: &[&str] = &[
    "bzip2", "flate", "gzip", "lz4", "pgzip", "snappy", "zlib", "zstd",
];

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DecompressConfig {
    /// One of bzip2, flate, gzip, lz4, pgzip, snappy, zlib, zstd.
    pub algorithm: String,
}

impl Spec for DecompressConfig {
    const SPEC: ComponentSpec = ComponentSpec {
        name: "decompress",
        kind: Kind::Processor,
        summary: "Decompresses each message with the chosen algorithm.",
        examples: &[Example {
            title: "Read gzipped messages",
            yaml: "input:\n  stdin: {}\npipeline:\n  processors:\n    - decompress: {algorithm: gzip}\noutput:\n  stdout: {}\n",
        }],
    };
}

impl BuildProcessor for DecompressConfig {
    fn build(&self, cx: &BuildContext) -> Result<Box<dyn Processor>, BuildError> {
        check_algorithm(cx, &self.algorithm, ALGORITHMS)?;
        Ok(Box::new(Decompress(self.algorithm.clone())))
    }
}

pub struct Decompress(String);

#[async_trait]
impl Processor for Decompress {
    async fn process_message(&self, msg: &mut Message) -> Result<bool, ProcessError> {
        let out = decompress_bytes(&self.0, msg.payload())
            .map_err(|e| ProcessError::new(format!("decompress {}: {e}", self.0)))?;
        msg.set_payload(out);
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mapping::methods::encoding::compress_bytes;
    use crate::processor::chain::test_support::{build, build_error, texts};

    #[tokio::test]
    async fn decompresses_what_compress_wrote() {
        for alg in super::super::compress::ALGORITHMS {
            let packed = compress_bytes(alg, b"some text", -1).unwrap();
            let p = build::<DecompressConfig>(&format!("{{algorithm: {alg}}}"));
            let out = p.process(vec![Message::new(packed)]).await;
            assert_eq!(texts(&out[0]), vec!["some text"], "{alg}");
        }
    }

    #[tokio::test]
    async fn garbage_is_marked_and_kept() {
        let p = build::<DecompressConfig>("{algorithm: zstd}");
        let out = p.process(vec![Message::new("not compressed")]).await;
        assert_eq!(texts(&out[0]), vec!["not compressed"]);
        let e = out[0][0].error().unwrap();
        assert!(e.contains("zstd"), "{e}");
    }

    #[test]
    fn unknown_algorithm_is_refused() {
        let e = build_error::<DecompressConfig>("{algorithm: rar}");
        assert!(e.contains("rar"), "{e}");
    }
}
