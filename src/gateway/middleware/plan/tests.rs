use super::{compile, Step};
use crate::apidef::tests::doc;
use crate::gateway::api::from_file;

/// The names of the steps in the plan of the API that `doc` defines, in order.
fn steps(doc: &str) -> Vec<&'static str> {
    let api = from_file("pets.yaml", doc).unwrap();
    compile(&api).steps().iter().map(|s| s.name()).collect()
}

#[test]
fn each_setting_puts_its_step_in_the_plan_and_apis_with_none_pass_through() {
    let plain = from_file("pets.yaml", &doc("")).unwrap();
    assert!(compile(&plain).is_empty());
    // Settings that are off, and an operation marked for a cache the API does not have,
    // do nothing.
    let off = "  middleware:\n    global:\n      cors: {enabled: false}\n      cache: {enabled: false}\n    operations:\n      getPet:\n        block: {enabled: false}\n        cache: {enabled: true}\n";
    assert!(steps(&doc(off)).is_empty());

    let global = |m: &str| format!("  middleware:\n    global:\n      {m}\n");
    let op = |m: &str| format!("  middleware:\n    operations:\n      getPet:\n        {m}\n");
    let key = "    authentication:\n      enabled: true\ncomponents:\n  securitySchemes:\n    k: {type: apiKey, in: header, name: X-Key}\nsecurity:\n  - k: []\n";
    let acting = [
        (
            global("cache: {timeout: 5, cacheAllSafeRequests: true}"),
            vec!["cache"],
        ),
        (global("cors: {allowedOrigins: ['*']}"), vec!["cors"]),
        (global("requestSizeLimit: {value: 10}"), vec!["size_limit"]),
        (
            global("transformRequestHeaders: {remove: [x-a]}"),
            vec!["request_headers"],
        ),
        (
            global("transformResponseHeaders: {remove: [x-a]}"),
            vec!["response_headers"],
        ),
        (op("block: {enabled: true}"), vec!["key_checks"]),
        (op("allow: {enabled: true}"), vec!["key_checks"]),
        (op("rateLimit: {rate: 5, per: 1s}"), vec!["rate_limit"]),
        (op("requestSizeLimit: {value: 5}"), vec!["size_limit"]),
        (op("validateRequest: {enabled: true}"), vec!["validate"]),
        (
            op("mockResponse:\n          fromOASExamples: {enabled: true}"),
            vec!["mock"],
        ),
        (key.to_owned(), vec!["auth", "key_checks", "key_limits"]),
    ];
    for (extra, want) in &acting {
        assert_eq!(&steps(&doc(extra)), want, "{extra}");
    }
    let limited = doc("").replace(
        r#"upstream: {url: "http://127.0.0.1:9/base/"}"#,
        r#"upstream: {url: "http://127.0.0.1:9/base/", rateLimit: {rate: 5, per: 1s}}"#,
    );
    assert_eq!(steps(&limited), ["rate_limit"]);
}

#[test]
fn the_size_limit_of_an_operation_is_the_smaller_of_its_own_and_the_global_one() {
    let extra = "  middleware:\n    global:\n      requestSizeLimit: {value: 10}\n    operations:\n      getPet:\n        requestSizeLimit: {value: 5}\n      myPets:\n        requestSizeLimit: {value: 50}\n";
    let api = from_file("pets.yaml", &doc(extra)).unwrap();
    let index = |id: &str| api.operations.iter().position(|op| op.id == id);
    let plan = compile(&api);
    let Some(Step::SizeLimit(limit)) = plan.steps().first() else {
        panic!("the plan is the size limit alone");
    };
    assert_eq!(limit.limit(index("getPet")), Some(5));
    assert_eq!(limit.limit(index("myPets")), Some(10));
    assert_eq!(limit.limit(None), Some(10));
}
