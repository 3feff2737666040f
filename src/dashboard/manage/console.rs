//! The web console and the developer portal's pages: the files under `console/` and
//! `portal/`, embedded in the binary at build time (`build.rs` lists them). The console is
//! served at `/` (the page) and `/console/<file>` (its modules, styles and icon); the
//! portal at `/portal/` and `/portal/<file>`, beside its API under `/portal/api/`. Both
//! are clients of the dashboard's API and nothing more, so their files need no
//! credentials, while every API path still does.
//!
//! Every answer carries a strict Content-Security-Policy (no inline script, calls to this
//! origin only, no framing) and an ETag from the file's hash; files are revalidated
//! (`no-cache`) rather than cached for good, because their names carry no hash.

use std::collections::HashMap;
use std::io::Write;

use bytes::Bytes;
use http::{header, HeaderMap, HeaderValue, Method, Response, StatusCode};
use sha2::{Digest, Sha256};

use crate::dashboard::error::ApiError;
use crate::http::{self as h, HttpResponse};

/// Every embedded file: its path from the crate's root (`console/app.js`) and its bytes.
const FILES: &[(&str, &[u8])] = include!(concat!(env!("OUT_DIR"), "/console_assets.rs"));

/// Where the console's files are served, but for the page itself, which is `/`.
pub const PREFIX: &str = "/console/";
const INDEX: &str = "console/index.html";
/// Where the portal's pages are served; its API is under `/portal/api/`.
pub const PORTAL_PREFIX: &str = "/portal/";
const PORTAL_INDEX: &str = "portal/index.html";

/// Scripts, styles, images and calls from this origin only; no inline script or style
/// attribute, no plugins, no framing, no form posting elsewhere.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
    img-src 'self' data:; connect-src 'self'; form-action 'self'; \
    frame-ancestors 'none'; base-uri 'none'";

/// Files at least this large are also kept gzipped; smaller ones gain nothing.
const GZIP_FROM: usize = 1024;

/// One file, ready to serve.
struct Asset {
    body: Bytes,
    etag: HeaderValue,
    /// The gzipped body and its own ETag (another representation needs another tag).
    gzipped: Option<(Bytes, HeaderValue)>,
    content_type: &'static str,
}

/// The embedded files by path.
pub struct Console {
    assets: HashMap<&'static str, Asset>,
}

impl Default for Console {
    fn default() -> Self {
        Console::new()
    }
}

impl Console {
    /// Hashes (and, when it pays, compresses) every embedded file once, at start.
    pub fn new() -> Console {
        let assets = FILES
            .iter()
            .map(|&(path, bytes)| {
                let hash = hex::encode(&Sha256::digest(bytes)[..12]);
                let gzipped = (bytes.len() >= GZIP_FROM)
                    .then(|| gzip(bytes))
                    .flatten()
                    .filter(|z| z.len() < bytes.len())
                    .and_then(|z| Some((z, tag(&format!("\"{hash}-gz\""))?)));
                let asset = Asset {
                    body: Bytes::from_static(bytes),
                    etag: tag(&format!("\"{hash}\"")).unwrap_or(HeaderValue::from_static("\"\"")),
                    gzipped,
                    content_type: content_type(path),
                };
                (path, asset)
            })
            .collect();
        Console { assets }
    }

    /// The answer if `path` is a page's (`/` or under [`PREFIX`], `/portal/` or a file
    /// under it); `None` for any other path, which is the API's.
    pub fn answer(&self, method: &Method, path: &str, headers: &HeaderMap) -> Option<HttpResponse> {
        let name = match path {
            "/" => INDEX.to_owned(),
            "/portal" | "/portal/" => PORTAL_INDEX.to_owned(),
            _ => match path.strip_prefix(PORTAL_PREFIX) {
                Some(rest) if rest == "api" || rest.starts_with("api/") => return None,
                Some(rest) => format!("portal/{rest}"),
                None => format!("console/{}", path.strip_prefix(PREFIX)?),
            },
        };
        let mut resp = self.file(method, &name, headers);
        secure(resp.headers_mut());
        Some(resp)
    }

    fn file(&self, method: &Method, name: &str, headers: &HeaderMap) -> HttpResponse {
        if method != Method::GET && method != Method::HEAD {
            return ApiError::MethodNotAllowed {
                allow: "GET, HEAD".into(),
            }
            .into_response();
        }
        let Some(asset) = self.assets.get(name) else {
            return ApiError::NotFound(format!("no such file: {name}")).into_response();
        };
        let (body, etag, gzipped) = match &asset.gzipped {
            Some((z, etag)) if accepts_gzip(headers) => (z, etag, true),
            _ => (&asset.body, &asset.etag, false),
        };
        let mut resp = if matches_etag(headers, etag) {
            let mut resp = Response::new(h::empty());
            *resp.status_mut() = StatusCode::NOT_MODIFIED;
            resp
        } else {
            let mut resp = if method == Method::HEAD {
                Response::new(h::empty())
            } else {
                Response::new(h::full(body.clone()))
            };
            let hs = resp.headers_mut();
            hs.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static(asset.content_type),
            );
            hs.insert(header::CONTENT_LENGTH, HeaderValue::from(body.len()));
            if gzipped {
                hs.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
            }
            resp
        };
        let hs = resp.headers_mut();
        hs.insert(header::ETAG, etag.clone());
        hs.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        if asset.gzipped.is_some() {
            hs.insert(header::VARY, HeaderValue::from_static("Accept-Encoding"));
        }
        resp
    }
}

/// The headers every console answer carries, errors included.
fn secure(headers: &mut HeaderMap) {
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
}

fn tag(text: &str) -> Option<HeaderValue> {
    HeaderValue::from_str(text).ok()
}

fn gzip(bytes: &[u8]) -> Option<Bytes> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    encoder.write_all(bytes).ok()?;
    encoder.finish().ok().map(Bytes::from)
}

fn content_type(path: &str) -> &'static str {
    match path.rsplit_once('.').map(|(_, ext)| ext) {
        Some("html") => "text/html; charset=utf-8",
        Some("js" | "mjs") => "text/javascript; charset=utf-8",
        Some("css") => "text/css; charset=utf-8",
        Some("svg") => "image/svg+xml",
        Some("png") => "image/png",
        Some("json") => "application/json",
        Some("txt") => "text/plain; charset=utf-8",
        _ => "application/octet-stream",
    }
}

/// Whether `Accept-Encoding` takes gzip (and does not refuse it with `q=0`).
fn accepts_gzip(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|item| {
            let mut parts = item.split(';').map(str::trim);
            let coding = parts.next().unwrap_or_default();
            let refused = parts.any(|p| {
                p.strip_prefix("q=")
                    .and_then(|q| q.trim().parse::<f32>().ok())
                    .is_some_and(|q| q <= 0.0)
            });
            coding.eq_ignore_ascii_case("gzip") && !refused
        })
}

/// Whether `If-None-Match` names `etag` (weakly compared, as RFC 9110 asks) or is `*`.
fn matches_etag(headers: &HeaderMap, etag: &HeaderValue) -> bool {
    let want = etag.to_str().unwrap_or_default();
    headers
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .any(|t| t == "*" || t.trim_start_matches("W/") == want)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    fn get(console: &Console, path: &str, headers: &[(&str, &str)]) -> HttpResponse {
        let mut map = HeaderMap::new();
        for (k, v) in headers {
            map.insert(
                header::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        console
            .answer(&Method::GET, path, &map)
            .expect("a console path")
    }

    async fn body(resp: HttpResponse) -> Bytes {
        resp.into_body().collect().await.unwrap().to_bytes()
    }

    #[tokio::test]
    async fn the_page_is_at_the_root_with_its_security_headers() {
        let console = Console::new();
        let resp = get(&console, "/", &[]);
        assert_eq!(resp.status(), StatusCode::OK);
        let hs = resp.headers().clone();
        assert_eq!(hs[header::CONTENT_TYPE], "text/html; charset=utf-8");
        assert_eq!(hs[header::CONTENT_SECURITY_POLICY], CSP);
        assert_eq!(hs[header::X_CONTENT_TYPE_OPTIONS], "nosniff");
        assert_eq!(hs[header::REFERRER_POLICY], "no-referrer");
        assert_eq!(hs[header::X_FRAME_OPTIONS], "DENY");
        assert!(hs.contains_key(header::ETAG));
        let html = String::from_utf8(body(resp).await.to_vec()).unwrap();
        assert!(html.contains("<script type=\"module\" src=\"/console/"));
    }

    #[test]
    fn only_the_root_and_the_prefix_are_the_consoles() {
        let console = Console::new();
        let none = HeaderMap::new();
        for path in [
            "/api/keys",
            "/ping",
            "/console",
            "/consolex/app.js",
            "/index.html",
        ] {
            assert!(
                console.answer(&Method::GET, path, &none).is_none(),
                "{path}"
            );
        }
        for path in ["/portal/api", "/portal/api/orgs/o/session"] {
            assert!(
                console.answer(&Method::GET, path, &none).is_none(),
                "{path}"
            );
        }
        let resp = get(&console, "/portal/", &[]);
        assert_eq!(resp.status(), StatusCode::OK);
        assert_eq!(resp.headers()[header::CONTENT_SECURITY_POLICY], CSP);
        let resp = get(&console, "/portal/../console/app.js", &[]);
        assert_eq!(resp.status(), StatusCode::NOT_FOUND);
        let resp = get(&console, "/console/../api/keys", &[]);
        assert_eq!(resp.status(), StatusCode::NOT_FOUND);
        assert_eq!(resp.headers()[header::X_FRAME_OPTIONS], "DENY");
        let resp = console
            .answer(&Method::POST, "/console/app.js", &none)
            .unwrap();
        assert_eq!(resp.status(), StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(resp.headers()[header::ALLOW], "GET, HEAD");
    }

    #[tokio::test]
    async fn files_revalidate_with_their_etag_and_come_gzipped_when_asked() {
        let console = Console::new();
        let resp = get(&console, "/console/app.js", &[]);
        assert_eq!(resp.status(), StatusCode::OK);
        assert_eq!(
            resp.headers()[header::CONTENT_TYPE],
            "text/javascript; charset=utf-8"
        );
        assert_eq!(resp.headers()[header::CACHE_CONTROL], "no-cache");
        let etag = resp.headers()[header::ETAG].to_str().unwrap().to_owned();
        let plain = body(resp).await;

        let resp = get(&console, "/console/app.js", &[("if-none-match", &etag)]);
        assert_eq!(resp.status(), StatusCode::NOT_MODIFIED);
        assert!(body(resp).await.is_empty());

        let resp = get(
            &console,
            "/console/app.js",
            &[("accept-encoding", "br, gzip")],
        );
        assert_eq!(resp.headers()[header::CONTENT_ENCODING], "gzip");
        assert_ne!(resp.headers()[header::ETAG].to_str().unwrap(), etag);
        let zipped = body(resp).await;
        let mut unzipped = Vec::new();
        std::io::Read::read_to_end(
            &mut flate2::read::GzDecoder::new(&zipped[..]),
            &mut unzipped,
        )
        .unwrap();
        assert_eq!(unzipped, plain);

        let resp = get(
            &console,
            "/console/app.js",
            &[("accept-encoding", "gzip;q=0")],
        );
        assert!(!resp.headers().contains_key(header::CONTENT_ENCODING));
    }

    #[test]
    fn content_types_follow_the_extension() {
        assert_eq!(content_type("a/b.css"), "text/css; charset=utf-8");
        assert_eq!(content_type("icon.svg"), "image/svg+xml");
        assert_eq!(content_type("noext"), "application/octet-stream");
        for (path, _) in FILES {
            assert_ne!(content_type(path), "application/octet-stream", "{path}");
        }
    }

    /// The page loads every file at most once, so their sum bounds what a page loads.
    #[test]
    fn the_console_stays_small_and_has_no_inline_script() {
        let total: usize = FILES.iter().map(|(_, b)| b.len()).sum();
        assert!(total < 400 * 1024, "{total} bytes");
        for page in [INDEX, PORTAL_INDEX] {
            let index = FILES.iter().find(|(p, _)| *p == page).expect(page);
            let html = std::str::from_utf8(index.1).unwrap();
            for tag in html.split("<script").skip(1) {
                let open = tag.split('>').next().unwrap_or_default();
                assert!(open.contains("src="), "an inline script: <script{open}>");
            }
            assert!(!html.contains(" style="), "an inline style attribute");
        }
    }
}
