//! The `sluice` command line: parses arguments and calls into the library.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

use sluice::component::Kind;

// Messages are allocated by one thread and freed by another all the time (an input's
// task, the pipeline's workers, an output's task); mimalloc's thread-local free lists
// keep that cheap where the system allocator spent a third of a pipeline's time.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "sluice",
    version,
    about = "A stream gateway: pipelines from YAML, HTTP/SSE/WebSocket streams, broker bridges.",
    long_about = "A stream gateway: pipelines from YAML, HTTP/SSE/WebSocket streams, broker bridges.\n\nStart with `sluice run pipelines/hello.yaml`, check configs with `sluice lint`, and see every component with `sluice list`."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the streams defined in one or more config files until they end or SIGINT/SIGTERM.
    Run {
        /// Stream config files (YAML).
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// Check config files without running them: every problem with its file, document
    /// path, line and column. Each file is checked on its own unless --together.
    Lint {
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Check the files as one config, as `sluice run` loads them (stream names and
        /// HTTP paths must not clash across files).
        #[arg(long)]
        together: bool,
        /// Output format.
        #[arg(long, value_enum, default_value_t = LintFormat::Text)]
        format: LintFormat,
    },
    /// Run the unit tests of stream configs: the `tests` of config files, and the
    /// `<name>_sluice_test.yaml` files beside them. Directories are searched recursively.
    /// Exits non-zero when a test fails.
    Test {
        /// Files or directories (`dir/...` also means the directory and below).
        #[arg(default_value = ".")]
        paths: Vec<PathBuf>,
    },
    /// Try a mapping: reads one message per line on standard input and writes each result.
    Blobl {
        /// The mapping (or use -f).
        mapping: Option<String>,
        /// Read the mapping from this file.
        #[arg(short = 'f', long = "file")]
        file: Option<PathBuf>,
        /// Metadata of every input message, as a JSON object.
        #[arg(long, env = "SLUICE_BLOBL_META")]
        meta: Option<String>,
        /// Take all of standard input as one message.
        #[arg(long, env = "SLUICE_BLOBL_SINGLE_MESSAGE", value_parser = clap::builder::BoolishValueParser::new(), default_value_t = false)]
        single: bool,
    },
    /// Run the API gateway: serves the APIs of an apps directory and/or the store, with
    /// authentication, keys, rate limits and the other middleware, and proxies to upstreams.
    Gateway {
        /// Gateway config (YAML). Without it the defaults apply; `SLUICE_GW_<SECTION>_<KEY>`
        /// environment variables override either.
        #[arg(long, short = 'c')]
        config: Option<PathBuf>,
    },
    /// Run the dashboard: the management API (assets, certificates, webhooks, APIs,
    /// organisations, users and keys) on the store that gateways read their APIs from.
    Dashboard {
        /// Dashboard config (YAML). Without it the defaults apply; `SLUICE_DB_<SECTION>_<KEY>`
        /// environment variables override either.
        #[arg(long, short = 'c', global = true)]
        config: Option<PathBuf>,
        #[command(subcommand)]
        action: Option<DashboardAction>,
    },
    /// Run the dashboard and the gateway in one process on embedded defaults: one SQLite
    /// store under ./data, streaming on, the dashboard on 127.0.0.1:3000 and the gateway on
    /// 127.0.0.1:8080. APIs created through the dashboard are served by the gateway at once.
    Serve {
        /// Gateway config (YAML); `SLUICE_GW_<SECTION>_<KEY>` variables override it.
        #[arg(long)]
        gateway_config: Option<PathBuf>,
        /// Dashboard config (YAML); `SLUICE_DB_<SECTION>_<KEY>` variables override it.
        #[arg(long)]
        dashboard_config: Option<PathBuf>,
    },
    /// List the available components with their fields, types, defaults and help.
    List {
        /// Only this family.
        family: Option<Family>,
        /// Print JSON instead of text (the same as `--format json`).
        #[arg(long)]
        json: bool,
        /// `text`, `json`, or `jsonschema`: a JSON Schema of the whole config file, for
        /// editors and validators.
        #[arg(long, value_enum, default_value_t = ListFormat::Text)]
        format: ListFormat,
    },
}

#[derive(Subcommand)]
enum DashboardAction {
    /// Create an organisation with an admin user, print the admin's key once, and exit.
    Bootstrap {
        /// The organisation's name (default: `admin.org` of the config).
        #[arg(long)]
        org: Option<String>,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum LintFormat {
    Text,
    Json,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum ListFormat {
    Text,
    Json,
    Jsonschema,
}

#[derive(Clone, Copy, ValueEnum)]
enum Family {
    Inputs,
    Processors,
    Outputs,
    Caches,
    RateLimits,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let code = match cli.command {
        Command::Run { files } => match tokio::runtime::Runtime::new() {
            Ok(rt) => rt.block_on(sluice::cli::run(&files)),
            Err(e) => {
                eprintln!("error: cannot start the runtime: {e}");
                1
            }
        },
        Command::Lint {
            files,
            together,
            format,
        } => {
            let format = match format {
                LintFormat::Text => sluice::cli::LintFormat::Text,
                LintFormat::Json => sluice::cli::LintFormat::Json,
            };
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build();
            match rt {
                Ok(rt) => rt.block_on(async {
                    sluice::cli::lint(&files, together, format, &mut std::io::stdout())
                }),
                Err(e) => {
                    eprintln!("error: cannot start the runtime: {e}");
                    1
                }
            }
        }
        Command::Test { paths } => match tokio::runtime::Runtime::new() {
            Ok(rt) => rt.block_on(sluice::cli::test(&paths, &mut std::io::stdout())),
            Err(e) => {
                eprintln!("error: cannot start the runtime: {e}");
                1
            }
        },
        Command::Blobl {
            mapping,
            file,
            meta,
            single,
        } => {
            if mapping.is_none() && file.is_none() {
                eprintln!("error: give a mapping, or a file with -f");
                return ExitCode::from(1);
            }
            let args = sluice::cli::blobl::BloblArgs {
                mapping,
                file,
                meta,
                single,
            };
            sluice::cli::blobl::run(
                args,
                std::io::stdin(),
                std::io::stdout().lock(),
                std::io::stderr(),
            )
        }
        Command::Gateway { config } => match tokio::runtime::Runtime::new() {
            Ok(rt) => rt.block_on(sluice::cli::gateway(config.as_deref())),
            Err(e) => {
                eprintln!("error: cannot start the runtime: {e}");
                1
            }
        },
        Command::Dashboard { config, action } => match tokio::runtime::Runtime::new() {
            Ok(rt) => rt.block_on(async {
                match action {
                    None => sluice::cli::dashboard(config.as_deref()).await,
                    Some(DashboardAction::Bootstrap { org }) => {
                        sluice::cli::dashboard_bootstrap(config.as_deref(), org.as_deref()).await
                    }
                }
            }),
            Err(e) => {
                eprintln!("error: cannot start the runtime: {e}");
                1
            }
        },
        Command::Serve {
            gateway_config,
            dashboard_config,
        } => match tokio::runtime::Runtime::new() {
            Ok(rt) => rt.block_on(sluice::cli::serve(
                gateway_config.as_deref(),
                dashboard_config.as_deref(),
            )),
            Err(e) => {
                eprintln!("error: cannot start the runtime: {e}");
                1
            }
        },
        Command::List {
            family,
            json,
            format,
        } => {
            if format == ListFormat::Jsonschema {
                let schema = sluice::stream::schema::config_schema();
                println!(
                    "{}",
                    serde_json::to_string_pretty(&schema).unwrap_or_default()
                );
                return ExitCode::SUCCESS;
            }
            let json = json || format == ListFormat::Json;
            let kind = family.map(|f| match f {
                Family::Inputs => Kind::Input,
                Family::Processors => Kind::Processor,
                Family::Outputs => Kind::Output,
                Family::Caches => Kind::Cache,
                Family::RateLimits => Kind::RateLimit,
            });
            match sluice::cli::list(kind, json, &mut std::io::stdout()) {
                Ok(()) => 0,
                Err(e) => {
                    eprintln!("error: {e}");
                    1
                }
            }
        }
    };
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}
