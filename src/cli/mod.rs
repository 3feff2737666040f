//! What the `sluice` subcommands do. `main.rs` only parses arguments and calls these.

pub mod blobl;

use std::io::Write;
use std::path::PathBuf;

use schemars::schema::{InstanceType, RootSchema, Schema, SingleOrVec};
use tokio_util::sync::CancellationToken;
use tracing::{error, info};
use tracing_subscriber::EnvFilter;

use crate::cache::CacheKind;
use crate::component::registry::Registry;
use crate::component::{ComponentSpec, Kind};
use crate::input::InputKind;
use crate::logging::{LogFormat, LogLevel, LoggerConfig};
use crate::output::OutputKind;
use crate::processor::ProcessorKind;
use crate::rate_limit::RateLimitKind;
use crate::server::{self, Server};
use crate::stream::config::{self, MetricsConfig, RootConfig};
use crate::stream::manager::Manager;
use crate::stream::StreamEnv;

/// `sluice run`: runs the streams of the given files until they end or a signal arrives.
/// Returns the process exit code.
pub async fn run(files: &[PathBuf]) -> i32 {
    let root = match config::load_files(files) {
        Ok(r) => r,
        Err(errors) => {
            eprintln!("{errors}");
            return 1;
        }
    };
    init_logging(&root.logger);
    let Ok(traces) = start_traces() else {
        return 1;
    };
    let code = run_config(root, shutdown_signal()).await;
    stop_traces(traces).await;
    code
}

/// Starts the trace exporter the `OTEL_*` variables ask for; `Err` once the reason is
/// printed.
fn start_traces() -> Result<Option<crate::telemetry::Traces>, ()> {
    crate::telemetry::install().map_err(|e| eprintln!("error: {e}"))
}

/// Sends the spans still queued.
async fn stop_traces(traces: Option<crate::telemetry::Traces>) {
    if let Some(traces) = traces {
        traces.shutdown().await;
    }
}

/// Runs a loaded config until `signal` fires or every stream ends.
pub async fn run_config(root: RootConfig, signal: impl std::future::Future<Output = ()>) -> i32 {
    let metrics = match root.metrics {
        MetricsConfig::Prometheus {} => Some(crate::metrics::install()),
        MetricsConfig::None {} => None,
    };
    let env = match StreamEnv::standalone().with_resources(&root.resources) {
        Ok(env) => env,
        Err(errors) => {
            for e in errors {
                eprintln!("error: {e}");
            }
            return 1;
        }
    };
    let mut manager = Manager::new(env.clone());
    if let Err(errors) = manager.start_all(&root.streams) {
        for e in errors {
            error!(error = %e, "Stream failed to build.");
            eprintln!("error: {e}");
        }
        return 1;
    }
    let stop_server = CancellationToken::new();
    // Without an `http` section the server listens only for components that serve HTTP.
    let listen = root
        .http
        .enabled
        .unwrap_or_else(|| !env.routes.paths().is_empty());
    let server_task = if listen {
        let listener = match server::bind(&root.http.address).await {
            Ok((l, _)) => l,
            Err(e) => {
                eprintln!("error: {e}");
                return 1;
            }
        };
        let server = Server {
            routes: env.routes.clone(),
            readiness: env.readiness.clone(),
            metrics,
            timeouts: server::Timeouts {
                header: root.http.header_read_timeout.0,
                body: root.http.body_read_timeout.0,
            },
        };
        Some(tokio::spawn(server.serve(listener, stop_server.clone())))
    } else {
        None
    };
    let report = manager.run_until(signal, root.shutdown_timeout.0).await;
    stop_server.cancel();
    if let Some(task) = server_task {
        let _ = task.await;
    }
    if report.abandoned > 0 {
        eprintln!(
            "error: shutdown timeout ({}) passed with {} batch(es) undelivered",
            root.shutdown_timeout, report.abandoned
        );
        1
    } else {
        info!("Stopped cleanly.");
        0
    }
}

/// `sluice serve`: the dashboard and the gateway in one process, sharing one store (an
/// SQLite file under `./data` unless configured), with streaming on. Returns the exit
/// code.
pub async fn serve(
    gateway_file: Option<&std::path::Path>,
    dashboard_file: Option<&std::path::Path>,
) -> i32 {
    use crate::dashboard::{config as db_config, open_store, Dashboard};
    use crate::gateway::config as gw_config;
    // The embedded defaults, under any file and environment variable.
    let gw_defaults = format!(
        "store:\n  url: {}\nstreaming:\n  enabled: true\n",
        db_config::DEFAULT_STORE_URL
    );
    let gw = match gateway_file {
        Some(f) => gw_config::load(Some(f), &gw_config::env_overrides()),
        None => gw_config::parse(
            "(sluice serve defaults)",
            &gw_defaults,
            &gw_config::env_overrides(),
        ),
    };
    let db = match dashboard_file {
        Some(f) => db_config::load(Some(f), &db_config::env_overrides()),
        None => db_config::parse(
            "(sluice serve defaults)",
            "streaming:\n  enabled: true\n",
            &db_config::env_overrides(),
        ),
    };
    let (gw, db) = match (gw, db) {
        (Ok(gw), Ok(db)) => (gw, db),
        (gw, db) => {
            for errors in [gw.err(), db.err()].into_iter().flatten() {
                eprintln!("{errors}");
            }
            return 1;
        }
    };
    // The organisations' quotas are the dashboard's; its gateway enforces those it runs.
    // Each refuses posted streams the other's listener as well as its own.
    let (mut gw, mut db) = (gw, db);
    gw.streaming.org_max_client_streams = db.quotas.max_client_streams;
    gw.streaming.org_max_inflight_bytes = db.quotas.max_inflight_bytes;
    gw.streaming
        .egress
        .also_own
        .extend(crate::egress::listener_address(&db.listen.socket()));
    db.streaming.egress.also_own.extend(
        [gw.listen.socket(), gw.control.socket()]
            .iter()
            .filter_map(|s| crate::egress::listener_address(s)),
    );
    // The dashboard refuses posted streams that name its gateway's cluster bus.
    db.streaming.egress.reserved.extend(&gw.reserved_names());
    init_logging(&gw.logger);
    let Ok(traces) = start_traces() else {
        return 1;
    };
    // One store for both when they name the same one: the gateway sees the dashboard's
    // APIs and keys.
    let store = match open_store(&db).await {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return 1;
        }
    };
    // Sealing (stored certificates' keys, webhook secrets) needs a secret; the embedded
    // defaults keep one beside the store rather than going without.
    if db.secret.is_none() && db.store.url == db_config::DEFAULT_STORE_URL {
        match data_secret(std::path::Path::new("./data/secret")) {
            Ok(secret) => db.secret = Some(secret),
            Err(e) => {
                eprintln!("error: ./data/secret: {e}");
                return 1;
            }
        }
    }
    // The gateway opens what the dashboard seals.
    if gw.store_secret.is_none() {
        gw.store_secret.clone_from(&db.secret);
    }
    let dashboard = match Dashboard::with_store(db, store.clone()).await {
        Ok(d) => d,
        Err(e) => {
            eprintln!("error: dashboard: {e}");
            return 1;
        }
    };
    let gateway = match crate::gateway::Gateway::start_with_store(gw, store).await {
        Ok(g) => g,
        Err(e) => {
            eprintln!("error: gateway: {e}");
            return 1;
        }
    };
    println!(
        "Sluice is serving: dashboard http://{}/api, gateway http://{} (control: http://{} for /metrics, /ready and /sluice/)",
        dashboard.address, gateway.address, gateway.control_address
    );
    if let Some(admin) = &dashboard.bootstrapped {
        print_new_admin(admin);
    }
    for e in &gateway.shared.table.current().errors {
        eprintln!("warning: {e}");
    }
    // An API written through the dashboard is loaded by the gateway at once, not at its
    // next poll.
    let (state, shared) = (dashboard.state.clone(), gateway.shared.clone());
    let relay = tokio::spawn(async move {
        loop {
            state.api_changed.notified().await;
            shared.reload_now.notify_one();
        }
    });
    let stop = CancellationToken::new();
    let dash = tokio::spawn(dashboard.serve(stop.clone()));
    let gate = tokio::spawn(gateway.serve(stop.clone()));
    shutdown_signal().await;
    info!("Stopping: finishing requests in flight.");
    stop.cancel();
    let _ = dash.await;
    let _ = gate.await;
    relay.abort();
    stop_traces(traces).await;
    0
}

/// The secret kept in `path`, made (random, readable by the owner only) when missing.
fn data_secret(path: &std::path::Path) -> std::io::Result<String> {
    use std::io::Write;
    match std::fs::read_to_string(path) {
        Ok(text) if text.trim().len() >= 32 => return Ok(text.trim().to_owned()),
        Ok(_) => {
            return Err(std::io::Error::other(
                "holds less than 32 characters; remove it to have a new one made",
            ))
        }
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        Err(_) => {}
    }
    let secret = hex::encode(rand::random::<[u8; 32]>());
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options.open(path)?;
    file.write_all(secret.as_bytes())?;
    Ok(secret)
}

/// `sluice dashboard`: serves the management API until a signal arrives. On a first start
/// (an empty store) it creates an organisation and an admin, and prints the admin's key
/// once. Returns the exit code.
pub async fn dashboard(config_file: Option<&std::path::Path>) -> i32 {
    use crate::dashboard::{config as db_config, Dashboard};
    let config = match db_config::load(config_file, &db_config::env_overrides()) {
        Ok(c) => c,
        Err(errors) => {
            eprintln!("{errors}");
            return 1;
        }
    };
    init_logging(&config.logger);
    let Ok(traces) = start_traces() else {
        return 1;
    };
    let dashboard = match Dashboard::start(config).await {
        Ok(d) => d,
        Err(e) => {
            error!(error = %e, "Dashboard failed to start.");
            eprintln!("error: {e}");
            return 1;
        }
    };
    if let Some(admin) = &dashboard.bootstrapped {
        print_new_admin(admin);
    }
    let stop = CancellationToken::new();
    let serving = tokio::spawn(dashboard.serve(stop.clone()));
    shutdown_signal().await;
    info!("Stopping: finishing requests in flight.");
    stop.cancel();
    let _ = serving.await;
    stop_traces(traces).await;
    0
}

/// `sluice dashboard bootstrap`: creates an organisation (named `org`, or as the config
/// says) with an admin, prints the admin's key once, and exits. Returns the exit code.
pub async fn dashboard_bootstrap(config_file: Option<&std::path::Path>, org: Option<&str>) -> i32 {
    use crate::dashboard::{auth, config as db_config, open_store};
    let config = match db_config::load(config_file, &db_config::env_overrides()) {
        Ok(c) => c,
        Err(errors) => {
            eprintln!("{errors}");
            return 1;
        }
    };
    init_logging(&config.logger);
    let store = match open_store(&config).await {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return 1;
        }
    };
    let name = org.unwrap_or(&config.admin.org);
    let created = auth::create_org(&store, name, "admin", config.admin.key.as_deref()).await;
    store.close().await;
    match created {
        Ok(admin) => {
            print_new_admin(&admin);
            0
        }
        Err(e) => {
            eprintln!("error: cannot create the organisation: {e}");
            1
        }
    }
}

/// Shows a new admin's key on standard output: the only time it is ever shown.
pub fn print_new_admin(admin: &crate::dashboard::auth::NewAdmin) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "Created organisation `{}` ({}) with user `admin`.\nAdmin key (shown once; keep it): {}",
        admin.org_name, admin.org_id, admin.key
    );
    let _ = out.flush();
}

/// `sluice gateway`: serves APIs until a signal arrives. Returns the exit code.
pub async fn gateway(config_file: Option<&std::path::Path>) -> i32 {
    let config =
        match crate::gateway::config::load(config_file, &crate::gateway::config::env_overrides()) {
            Ok(c) => c,
            Err(errors) => {
                eprintln!("{errors}");
                return 1;
            }
        };
    init_logging(&config.logger);
    let Ok(traces) = start_traces() else {
        return 1;
    };
    let gateway = match crate::gateway::Gateway::start(config).await {
        Ok(g) => g,
        Err(e) => {
            error!(error = %e, "Gateway failed to start.");
            eprintln!("error: {e}");
            return 1;
        }
    };
    for e in &gateway.shared.table.current().errors {
        eprintln!("warning: {e}");
    }
    let stop = CancellationToken::new();
    let serving = tokio::spawn(gateway.serve(stop.clone()));
    shutdown_signal().await;
    info!("Stopping: finishing requests in flight.");
    stop.cancel();
    let _ = serving.await;
    stop_traces(traces).await;
    0
}

/// Resolves on SIGINT or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = ctrl_c => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = ctrl_c.await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}

fn init_logging(logger: &LoggerConfig) {
    let level = match logger.level {
        LogLevel::Off => "off",
        LogLevel::Error => "error",
        LogLevel::Warn => "warn",
        LogLevel::Info => "info",
        LogLevel::Debug => "debug",
        LogLevel::Trace => "trace",
    };
    // SLUICE_LOG (filter syntax, e.g. `sluice=debug`) overrides the config's level.
    let filter = EnvFilter::try_from_env("SLUICE_LOG").unwrap_or_else(|_| EnvFilter::new(level));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    // Logs go to standard error: standard output carries data (the stdout output).
    let _ = match logger.format {
        LogFormat::Json => builder.json().try_init(),
        LogFormat::Text => builder.try_init(),
    };
}

/// How `sluice lint` prints what it found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LintFormat {
    /// One line per problem: `file:line:col (path): message`, warnings led by `warning:`.
    #[default]
    Text,
    /// A JSON array of `{severity, file, path, line, column, message, suggestion}`, for
    /// editors and CI.
    Json,
}

/// `sluice lint`: checks config files without running them, printing every problem with
/// its position. Each file is checked on its own unless `together`. An API definition
/// (a document with `x-sluice-streaming` or `x-sluice-api-gateway`) is checked as the
/// gateway compiles it, and warned about where it would not behave the same on several
/// gateways. Returns the exit code: 1 for errors, 0 with warnings only.
pub fn lint(files: &[PathBuf], together: bool, format: LintFormat, out: &mut dyn Write) -> i32 {
    let (apis, pipelines): (Vec<PathBuf>, Vec<PathBuf>) =
        files.iter().cloned().partition(|f| is_api_document(f));
    let mut errors = if pipelines.is_empty() {
        Vec::new()
    } else {
        config::lint_files(&pipelines, together)
    };
    let mut warnings = Vec::new();
    for file in &apis {
        lint_api(file, &mut errors, &mut warnings);
    }
    let all = errors
        .iter()
        .map(|e| ("error", e))
        .chain(warnings.iter().map(|w| ("warning", w)));
    let written = match format {
        LintFormat::Text => all
            .into_iter()
            .try_for_each(|(severity, e)| match severity {
                "warning" => writeln!(out, "warning: {e}"),
                _ => writeln!(out, "{e}"),
            }),
        LintFormat::Json => {
            let items: Vec<_> = all
                .map(|(severity, e)| {
                    let loc = e.location.as_ref();
                    serde_json::json!({
                        "severity": severity,
                        "file": loc.map(|l| l.file.to_string()),
                        "path": loc.map(|l| l.path.clone()),
                        "line": loc.map(|l| l.line),
                        "column": loc.map(|l| l.col),
                        "message": e.message,
                        "suggestion": e.suggestion,
                    })
                })
                .collect();
            writeln!(out, "{}", serde_json::Value::Array(items))
        }
    };
    if written.is_err() {
        return 2;
    }
    i32::from(!errors.is_empty())
}

/// Whether `file` reads as an API definition rather than a pipeline config.
fn is_api_document(file: &std::path::Path) -> bool {
    let Ok(text) = std::fs::read_to_string(file) else {
        return false;
    };
    let Ok(serde_yaml::Value::Mapping(top)) = serde_yaml::from_str::<serde_yaml::Value>(&text)
    else {
        return false;
    };
    [
        crate::apidef::streaming::STREAMING,
        crate::apidef::EXTENSION,
    ]
    .iter()
    .any(|key| top.contains_key(*key))
}

/// Compiles the API definition in `file` as the gateway would.
fn lint_api(
    file: &std::path::Path,
    errors: &mut Vec<crate::config::ConfigError>,
    warnings: &mut Vec<crate::config::ConfigError>,
) {
    use crate::config::ConfigError;
    let name = file.display().to_string();
    let text = match std::fs::read_to_string(file) {
        Ok(t) => t,
        Err(e) => {
            errors.push(ConfigError::new(format!("{name}: cannot read: {e}")));
            return;
        }
    };
    match crate::gateway::api::from_file(&name, &text) {
        Err(e) => errors.extend(e.errors.0),
        Ok(api) => {
            let doc = crate::config::yaml::parse(&name, &text, &crate::config::process_env).ok();
            for (path, message) in crate::apidef::streaming::cluster_warnings(&api) {
                let mut warning = ConfigError::new(message);
                if let Some(doc) = &doc {
                    warning = warning.at(doc.location(&path, doc.locate(&path)));
                }
                warnings.push(warning);
            }
        }
    }
}

/// `sluice test`: runs the config tests found in `paths` and reports each test, with every
/// failure placed in its file. Returns 0 when all passed, 1 otherwise.
pub async fn test(paths: &[PathBuf], out: &mut dyn Write) -> i32 {
    let files = match crate::testing::discover(paths) {
        Ok(f) => f,
        Err(e) => {
            let _ = writeln!(out, "error: {e}");
            return 1;
        }
    };
    let (mut passed, mut failed, mut broken) = (0usize, 0usize, 0usize);
    for file in &files {
        match crate::testing::run_file(file).await {
            Ok(outcomes) => {
                for o in outcomes {
                    let line = o.location.line;
                    if o.passed() {
                        passed += 1;
                        let _ = writeln!(out, "PASS {}:{line} {}", file.display(), o.name);
                    } else {
                        failed += 1;
                        let _ = writeln!(out, "FAIL {}:{line} {}", file.display(), o.name);
                        for f in &o.failures {
                            let _ = writeln!(out, "  {f}");
                        }
                    }
                }
            }
            Err(errors) => {
                broken += 1;
                let _ = writeln!(out, "ERROR {}", file.display());
                for e in &errors.0 {
                    let _ = writeln!(out, "  {e}");
                }
            }
        }
    }
    let _ = writeln!(
        out,
        "{} test(s) in {} file(s): {passed} passed, {failed} failed{}",
        passed + failed,
        files.len(),
        if broken > 0 {
            format!(", {broken} file(s) could not be run")
        } else {
            String::new()
        }
    );
    if files.is_empty() {
        let _ = writeln!(out, "error: no config tests found");
        return 1;
    }
    i32::from(failed > 0 || broken > 0)
}

/// `sluice list`: every component with its fields, types, defaults and help.
pub fn list(kind: Option<Kind>, json: bool, out: &mut dyn Write) -> std::io::Result<()> {
    let mut families: Vec<(Kind, Vec<(ComponentSpec, RootSchema)>)> = vec![
        (Kind::Input, InputKind::specs()),
        (Kind::Processor, ProcessorKind::specs()),
        (Kind::Output, OutputKind::specs()),
        (Kind::Cache, CacheKind::specs()),
        (Kind::RateLimit, RateLimitKind::specs()),
    ];
    families.retain(|(k, _)| kind.is_none_or(|want| want == *k));
    if json {
        let doc: serde_json::Value = families
            .iter()
            .map(|(k, specs)| {
                let items: Vec<_> = specs
                    .iter()
                    .map(|(spec, schema)| {
                        serde_json::json!({
                            "name": spec.name,
                            "summary": spec.summary,
                            "fields": fields(schema).iter().map(|f| serde_json::json!({
                                "name": f.name, "type": f.ty, "default": f.default,
                                "required": f.required, "description": f.description,
                            })).collect::<Vec<_>>(),
                        })
                    })
                    .collect();
                (format!("{k}s"), serde_json::Value::Array(items))
            })
            .collect::<serde_json::Map<_, _>>()
            .into();
        return writeln!(
            out,
            "{}",
            serde_json::to_string_pretty(&doc).unwrap_or_default()
        );
    }
    for (k, specs) in families {
        writeln!(out, "{}S", k.as_str().to_uppercase())?;
        for (spec, schema) in specs {
            writeln!(out, "\n  {} - {}", spec.name, spec.summary)?;
            for f in fields(&schema) {
                let default = match (&f.default, f.required) {
                    (_, true) => "required".to_owned(),
                    (Some(d), _) => format!("default {d}"),
                    (None, _) => "optional".to_owned(),
                };
                writeln!(
                    out,
                    "    {:<20} {:<10} {:<22} {}",
                    f.name, f.ty, default, f.description
                )?;
            }
        }
        writeln!(out)?;
    }
    Ok(())
}

/// One documented field of a component config.
pub struct FieldDoc {
    pub name: String,
    pub ty: String,
    pub default: Option<String>,
    pub required: bool,
    pub description: String,
}

/// Reads a config's fields out of its JSON schema (doc comments are the descriptions).
pub fn fields(schema: &RootSchema) -> Vec<FieldDoc> {
    let Some(obj) = &schema.schema.object else {
        return Vec::new();
    };
    obj.properties
        .iter()
        .map(|(name, prop)| {
            let (ty, default, description) = match prop {
                Schema::Object(o) => {
                    let meta = o.metadata.as_deref();
                    (
                        type_name(o, schema),
                        meta.and_then(|m| m.default.as_ref()).map(|d| d.to_string()),
                        meta.and_then(|m| m.description.clone()).unwrap_or_default(),
                    )
                }
                Schema::Bool(_) => ("any".into(), None, String::new()),
            };
            FieldDoc {
                name: name.clone(),
                ty,
                default,
                required: obj.required.contains(name),
                description: description.replace('\n', " "),
            }
        })
        .collect()
}

fn type_name(o: &schemars::schema::SchemaObject, root: &RootSchema) -> String {
    if let Some(r) = &o.reference {
        let name = r.rsplit('/').next().unwrap_or(r);
        return match root.definitions.get(name) {
            Some(Schema::Object(def)) if def.instance_type.is_some() => type_name(def, root),
            _ => name.to_lowercase(),
        };
    }
    if o.subschemas
        .as_ref()
        .is_some_and(|s| s.all_of.is_some() || s.any_of.is_some())
    {
        if let Some(Schema::Object(first)) = o
            .subschemas
            .as_ref()
            .and_then(|s| s.all_of.as_ref().or(s.any_of.as_ref()))
            .and_then(|v| v.first())
        {
            return type_name(first, root);
        }
    }
    if o.format.as_deref() == Some("duration") {
        return "duration".into();
    }
    if o.enum_values.is_some() {
        return "enum".into();
    }
    let single = |t: &InstanceType| match t {
        InstanceType::Array => "array",
        InstanceType::Boolean => "bool",
        InstanceType::Integer => "int",
        InstanceType::Number => "number",
        InstanceType::Object => "object",
        InstanceType::String => "string",
        InstanceType::Null => "null",
    };
    match &o.instance_type {
        Some(SingleOrVec::Single(t)) => single(t).into(),
        Some(SingleOrVec::Vec(ts)) => ts
            .iter()
            .filter(|t| **t != InstanceType::Null)
            .map(single)
            .next()
            .unwrap_or("any")
            .into(),
        None => "object".into(),
    }
}
