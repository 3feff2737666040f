//! Functions that read the environment: variables, files and the host's name.

use crate::mapping::exec::{own, Ctx, V};
use crate::mapping::program::FuncCall;
use crate::mapping::spec::{ex, opt, p, Args, Default, FunctionSpec, Res};
use crate::value::Value;

pub static SPECS: &[FunctionSpec] = &[
    FunctionSpec {
        name: "env",
        category: "Environment",
        description: "The value of an environment variable, or null when unset.",
        params: &[p("name"), opt("no_cache", Default::Bool(false))],
        examples: &[ex(
            r#"root.v = env("SLUICE_SURELY_UNSET_VARIABLE")"#,
            "{}",
            r#"{"v":null}"#,
        )],
        pure: false,
        needs_message: false,
        imp: env,
    },
    FunctionSpec {
        name: "file",
        category: "Environment",
        description: "The contents of a file, as bytes.",
        params: &[p("path"), opt("no_cache", Default::Bool(false))],
        examples: &[],
        pure: false,
        needs_message: false,
        imp: file,
    },
    FunctionSpec {
        name: "file_rel",
        category: "Environment",
        description: "The contents of a file relative to the working directory, as bytes.",
        params: &[p("path"), opt("no_cache", Default::Bool(false))],
        examples: &[],
        pure: false,
        needs_message: false,
        imp: file,
    },
    FunctionSpec {
        name: "hostname",
        category: "Environment",
        description: "The host name of the machine.",
        params: &[],
        examples: &[],
        pure: false,
        needs_message: false,
        imp: hostname,
    },
];

fn hostname<'a>(_: &'a FuncCall, _: &Args<'_>, _: &Ctx<'a>) -> Res<V<'a>> {
    own(gethostname::gethostname().to_string_lossy().into_owned())
}

fn env<'a>(_: &'a FuncCall, args: &Args<'_>, _: &Ctx<'a>) -> Res<V<'a>> {
    match std::env::var(args.str(0)?) {
        Ok(v) => own(v),
        Err(_) => own(Value::Null),
    }
}

fn file<'a>(_: &'a FuncCall, args: &Args<'_>, _: &Ctx<'a>) -> Res<V<'a>> {
    let path = args.str(0)?;
    std::fs::read(path)
        .map(|b| V::Own(Value::Bytes(b.into())))
        .map_err(|e| format!("failed to read file {path:?}: {e}"))
}
