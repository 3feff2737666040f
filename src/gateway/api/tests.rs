use super::steps::Step;
use super::*;

fn doc(extra: &str) -> String {
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
fn each_setting_puts_its_step_in_the_plan_and_apis_with_none_pass_through() {
    let plain = from_file("pets.yaml", &doc("")).unwrap();
    assert!(plain.passes_through());
    // Settings that are off, and an operation marked for a cache the API does not have,
    // do nothing.
    let off = "  middleware:\n    global:\n      cors: {enabled: false}\n      cache: {enabled: false}\n    operations:\n      getPet:\n        block: {enabled: false}\n        cache: {enabled: true}\n";
    assert!(from_file("pets.yaml", &doc(off)).unwrap().passes_through());

    let global = |m: &str| format!("  middleware:\n    global:\n      {m}\n");
    let op = |m: &str| format!("  middleware:\n    operations:\n      getPet:\n        {m}\n");
    let key = "    authentication:\n      enabled: true\ncomponents:\n  securitySchemes:\n    k: {type: apiKey, in: header, name: X-Key}\nsecurity:\n  - k: []\n";
    let acting = [
        (
            global("cache: {timeout: 5, cacheAllSafeRequests: true}"),
            vec![Step::Cache],
        ),
        (global("cors: {allowedOrigins: ['*']}"), vec![Step::Cors]),
        (
            global("requestSizeLimit: {value: 10}"),
            vec![Step::SizeLimit],
        ),
        (
            global("transformRequestHeaders: {remove: [x-a]}"),
            vec![Step::RequestHeaders],
        ),
        (
            global("transformResponseHeaders: {remove: [x-a]}"),
            vec![Step::ResponseHeaders],
        ),
        (op("block: {enabled: true}"), vec![Step::KeyChecks]),
        (op("allow: {enabled: true}"), vec![Step::KeyChecks]),
        (op("rateLimit: {rate: 5, per: 1s}"), vec![Step::ApiLimit]),
        (op("requestSizeLimit: {value: 5}"), vec![Step::SizeLimit]),
        (op("validateRequest: {enabled: true}"), vec![Step::Validate]),
        (
            op("mockResponse:\n          fromOASExamples: {enabled: true}"),
            vec![Step::Mock],
        ),
        (
            key.to_owned(),
            vec![Step::Auth, Step::KeyChecks, Step::KeyLimits],
        ),
    ];
    for (extra, steps) in &acting {
        let api = from_file("pets.yaml", &doc(extra)).unwrap();
        assert_eq!(&*api.steps, steps.as_slice(), "{extra}");
        assert!(!api.passes_through(), "{extra}");
    }
    let limited = doc("").replace(
        r#"upstream: {url: "http://127.0.0.1:9/base/"}"#,
        r#"upstream: {url: "http://127.0.0.1:9/base/", rateLimit: {rate: 5, per: 1s}}"#,
    );
    let api = from_file("pets.yaml", &limited).unwrap();
    assert_eq!(&*api.steps, [Step::ApiLimit].as_slice());
}
