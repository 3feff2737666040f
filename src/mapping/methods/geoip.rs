//! GeoIP lookups in MaxMind databases. The database file is a parameter (Sluice ships no
//! data); each file is opened once and shared. The result is the database's record for the
//! address as an object, or null when the address is not in it.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, LazyLock};

use maxminddb::{MaxMindDBError, Reader};
use parking_lot::Mutex;

use super::text;
use crate::mapping::exec::{own, V};
use crate::mapping::spec::{ex, method, p, Args, MethodSpec, Res};
use crate::value::Value;

const CAT: &str = "GeoIP";

pub static SPECS: &[MethodSpec] = &[
    method(
        "geoip_city",
        CAT,
        "The City database record for an IP address.",
        &[p("path")],
        &[ex(
            r#"root = this.ip.geoip_city("/nonexistent/GeoLite2-City.mmdb")"#,
            r#"{"ip":"81.2.69.142"}"#,
            "error:cannot open GeoIP database",
        )],
        lookup,
    ),
    method(
        "geoip_country",
        CAT,
        "The Country database record for an IP address.",
        &[p("path")],
        &[],
        lookup,
    ),
    method(
        "geoip_asn",
        CAT,
        "The ASN database record for an IP address.",
        &[p("path")],
        &[],
        lookup,
    ),
    method(
        "geoip_isp",
        CAT,
        "The ISP database record for an IP address.",
        &[p("path")],
        &[],
        lookup,
    ),
    method(
        "geoip_anonymous_ip",
        CAT,
        "The Anonymous IP database record for an IP address.",
        &[p("path")],
        &[],
        lookup,
    ),
    method(
        "geoip_connection_type",
        CAT,
        "The Connection Type database record for an IP address.",
        &[p("path")],
        &[],
        lookup,
    ),
    method(
        "geoip_domain",
        CAT,
        "The Domain database record for an IP address.",
        &[p("path")],
        &[],
        lookup,
    ),
    method(
        "geoip_enterprise",
        CAT,
        "The Enterprise database record for an IP address.",
        &[p("path")],
        &[ex(
            r#"root = this.ip.geoip_enterprise("/nonexistent/e.mmdb")"#,
            r#"{"ip":"not an address"}"#,
            "error:not an IP address",
        )],
        lookup,
    ),
];

type Db = Arc<Reader<Vec<u8>>>;

/// Opened databases by path: opening reads the whole file.
static DATABASES: LazyLock<Mutex<HashMap<String, Db>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

fn open(path: &str) -> Res<Db> {
    if let Some(db) = DATABASES.lock().get(path) {
        return Ok(db.clone());
    }
    let db = Arc::new(
        Reader::open_readfile(path)
            .map_err(|e| format!("cannot open GeoIP database {path:?}: {e}"))?,
    );
    DATABASES.lock().insert(path.to_string(), db.clone());
    Ok(db)
}

fn lookup<'b>(v: &'b Value, args: &Args<'_>) -> Res<V<'b>> {
    let addr = text(v)?;
    let ip: IpAddr = addr
        .trim()
        .parse()
        .map_err(|_| format!("{addr:?} is not an IP address"))?;
    let db = open(args.str(0)?)?;
    match db.lookup::<Value>(ip) {
        Ok(record) => own(record),
        Err(MaxMindDBError::AddressNotFoundError(_)) => own(Value::Null),
        Err(e) => Err(format!("GeoIP lookup failed: {e}")),
    }
}
