use super::*;

/// A definition of two pet operations behind `/pets-api`, with `extra` appended (more
/// of `x-sluice-api-gateway`): the fixture of the definition's and the gateway's tests.
pub(crate) fn doc(extra: &str) -> String {
    format!(
        r#"openapi: 3.0.3
info: {{title: t, version: "1"}}
paths:
  /pets/{{id}}:
    get:
      operationId: getPet
      responses: {{"200": {{description: ok, content: {{application/json: {{example: {{name: rex}}}}}}}}}}
  /pets/mine:
    get:
      operationId: myPets
      responses: {{"200": {{description: ok}}}}
x-sluice-api-gateway:
  info: {{id: pets, name: Pets}}
  upstream: {{url: "http://127.0.0.1:9/base/"}}
  server:
    listenPath: {{value: /pets-api/, strip: true}}
{extra}"#
    )
}

#[test]
fn a_definition_compiles() {
    let api = from_file("pets.yaml", &doc("")).unwrap();
    assert_eq!(api.id, "pets");
    assert_eq!(api.listen_path, "/pets-api");
    assert_eq!(api.upstream_url.as_ref().unwrap().base_path, "/base");
    assert_eq!(api.below("/pets-api/pets/1"), Some("/pets/1"));
    assert_eq!(api.below("/pets-apix"), None);
    let (op, params) = api.operation(&Method::GET, "/pets/7").unwrap();
    assert_eq!(op.id, "getPet");
    assert_eq!(params, vec![("id".to_owned(), "7".to_owned())]);
    // The literal template wins over the parameter.
    assert_eq!(
        api.operation(&Method::GET, "/pets/mine").unwrap().0.id,
        "myPets"
    );
    assert!(api.operation(&Method::POST, "/pets/7").is_none());
}

#[test]
fn mocks_from_examples() {
    let api = from_file(
        "pets.yaml",
        &doc("  middleware:\n    operations:\n      getPet:\n        mockResponse:\n          fromOASExamples: {enabled: true}\n"),
    )
    .unwrap();
    let mock = api
        .operations
        .iter()
        .find(|o| o.id == "getPet")
        .unwrap()
        .mock
        .as_ref()
        .unwrap();
    assert_eq!(&mock.body[..], br#"{"name":"rex"}"#);
}

#[test]
fn bad_settings_name_the_api_and_the_place() {
    let cases = [
        ("  middleware:\n    operations:\n      nope:\n        block: {enabled: true}\n", "no operation `nope`", "x-sluice-api-gateway.middleware.operations.nope"),
        ("  middleware:\n    operations:\n      getPet:\n        allow: {enabled: true}\n        block: {enabled: true}\n", "both on", "getPet"),
        ("  middleware:\n    global:\n      requestSizeLimit: {value: ten}\n", "", "requestSizeLimit.value"),
        ("  middleware:\n    operations:\n      getPet:\n        rateLimit: {rate: 0, per: 1s}\n", "above zero", "rateLimit.rate"),
    ];
    for (extra, message, path) in cases {
        let e = from_file("pets.yaml", &doc(extra)).err().unwrap();
        let text = e.to_string();
        assert!(text.starts_with("API `pets`"), "{text}");
        assert!(text.contains(message), "{text}");
        assert!(text.contains(path), "{text}");
        assert!(text.contains("pets.yaml:"), "{text}");
    }
}

#[test]
fn authentication_needs_known_schemes() {
    let auth = "    authentication:\n      enabled: true\ncomponents:\n  securitySchemes:\n    o:\n      type: oauth2\n";
    let e = from_file("pets.yaml", &doc(auth)).err().unwrap();
    assert!(e.to_string().contains("`oauth2` is not supported"), "{e}");
    let jwt_without_settings = "    authentication:\n      enabled: true\ncomponents:\n  securitySchemes:\n    j:\n      type: http\n      scheme: bearer\n";
    let e = from_file("pets.yaml", &doc(jwt_without_settings))
        .err()
        .unwrap();
    assert!(e.to_string().contains("signingMethod"), "{e}");
    let key = "    authentication:\n      enabled: true\ncomponents:\n  securitySchemes:\n    k: {type: apiKey, in: header, name: X-Key}\nsecurity:\n  - k: []\n";
    let api = from_file("pets.yaml", &doc(key)).unwrap();
    let auth = api.security.unwrap();
    assert_eq!(auth.alternatives, vec![vec![0]]);
}

#[test]
fn json_documents_take_no_environment() {
    std::env::set_var("SLUICE_TEST_API_SECRET", "leaked");
    let mut v: serde_json::Value = serde_yaml::from_str(&doc("")).unwrap();
    v["x-sluice-api-gateway"]["info"]["name"] = "${SLUICE_TEST_API_SECRET}".into();
    let api = from_json("store:pets", &v).unwrap();
    assert_eq!(api.name, "${SLUICE_TEST_API_SECRET}");
}

#[test]
fn not_openapi_is_refused() {
    let e = from_file("x.yaml", "swagger: '2.0'\n").err().unwrap();
    assert!(e.to_string().contains("openapi"), "{e}");
    let e = from_file("x.json", "{\"openapi\": \"3.0.0\"}")
        .err()
        .unwrap();
    assert!(e.to_string().contains("x-sluice-api-gateway"), "{e}");
}

/// A streams-only API with `upstream` as given.
fn streams_only(upstream: &str) -> String {
    format!(
        r#"openapi: 3.0.3
info: {{title: t, version: "1"}}
paths: {{}}
x-sluice-api-gateway:
  info: {{id: live, name: Live}}
  {upstream}
  server:
    listenPath: {{value: /live/, strip: true}}
x-sluice-streaming:
  input:
    http_server: {{path: /in}}
  output:
    drop: {{}}
"#
    )
}

#[test]
fn a_streams_only_api_takes_an_empty_upstream_url_and_an_api_wide_rate_limit() {
    let api = from_file("live.yaml", &streams_only(r#"upstream: {url: ""}"#)).unwrap();
    assert!(api.upstream_url.is_none());
    let api = from_file(
        "live.yaml",
        &streams_only("upstream: {rateLimit: {rate: 5, per: 1s}}"),
    )
    .unwrap();
    assert!(api.upstream_url.is_none());
    assert_eq!(api.rate.map(|r| r.rate), Some(5));
    // The bare stream runs as `default`.
    assert_eq!(api.streams.len(), 1);
    assert_eq!(api.streams[0].name, streaming::BARE_STREAM);
    assert_eq!(api.streams[0].paths, vec!["/in".to_owned()]);
}

#[test]
fn an_upstream_without_a_url_on_an_api_without_streams_is_refused_at_the_url() {
    let text = doc("").replace(
        r#"upstream: {url: "http://127.0.0.1:9/base/"}"#,
        r#"upstream: {url: "", rateLimit: {rate: 5, per: 1s}}"#,
    );
    let e = from_file("pets.yaml", &text).err().unwrap().to_string();
    assert!(
        e.contains("upstream.url") && e.contains("no upstream `url`"),
        "{e}"
    );
}
