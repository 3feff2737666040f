//! The engine as users run it: the `sluice` binary, real HTTP clients and servers,
//! files, and signals.

use crate::common;

use std::process::Stdio;

use common::{eventually, read_lines, Sink, Sluice};
use tokio::io::AsyncWriteExt;

fn lines(n: usize) -> String {
    (1..=n).map(|i| format!("{i}\n")).collect()
}

/// What a running sluice's `/metrics` says.
async fn metrics_of(s: &Sluice) -> String {
    reqwest::get(s.url("/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// Feeds `input` to a spawned sluice's standard input and closes it.
async fn feed(sluice: &mut Sluice, input: &str) {
    let mut stdin = sluice.child.stdin.take().expect("stdin piped");
    stdin
        .write_all(input.as_bytes())
        .await
        .expect("write stdin");
    drop(stdin);
}

#[tokio::test]
async fn retry_output_delivers_each_message_once_and_in_order_through_failures() {
    // The sink fails the first two requests: the first message is retried in place.
    let sink = Sink::start(vec![1, 2]).await;
    let config = format!(
        "http: {{address: 127.0.0.1:{{port}}}}\ninput:\n  stdin: {{}}\noutput:\n  retry:\n    output:\n      http_client: {{url: '{}', retries: 0}}\n    backoff: {{initial_interval: 10ms, max_interval: 50ms}}\n",
        sink.url()
    );
    let mut s = Sluice::start_with(&config, Stdio::piped()).await;
    feed(&mut s, &lines(20)).await;
    let (code, _, stderr) = s.finish().await;
    assert_eq!(code, 0, "{stderr}");
    let expected: Vec<String> = (1..=20).map(|i| i.to_string()).collect();
    assert_eq!(sink.bodies(), expected);
    assert_eq!(sink.requests.load(std::sync::atomic::Ordering::SeqCst), 22);
}

/// Feeds `n` numbered lines to a sluice reading stdin, with `processors` (a YAML list,
/// `[]` for none) and an `http_client` output without retries, one write at a time, to a
/// sink that fails the requests numbered in `fail`. Returns what the sink took, ordered
/// by the line number each body starts with.
async fn through_failing_sink(fail: Vec<usize>, processors: &str, n: usize) -> Vec<String> {
    let sink = Sink::start(fail).await;
    let config = format!(
        "http: {{enabled: false}}\ninput:\n  stdin: {{}}\npipeline:\n  processors: {processors}\noutput:\n  http_client: {{url: '{}', retries: 0, max_in_flight: 1}}\n",
        sink.url()
    );
    let mut s = Sluice::start_with(&config, Stdio::piped()).await;
    feed(&mut s, &lines(n)).await;
    let (code, _, stderr) = s.finish().await;
    assert_eq!(code, 0, "{stderr}");
    let mut got = sink.bodies();
    got.sort_by_key(|b| b.trim_end_matches('!').parse::<u32>().unwrap_or(0));
    got
}

/// Every expected message arrived, nothing else did, and no message arrived more often
/// than the writes failed: an input reads what is ready as one batch, and a failed batch
/// goes again as one unit, so the messages written before the failure arrive again.
fn assert_at_least_once(got: Vec<String>, expected: &[String]) {
    let mut unique = got.clone();
    unique.dedup();
    assert_eq!(unique, expected, "every message, and nothing else: {got:?}");
    for m in expected {
        let times = got.iter().filter(|g| *g == m).count();
        assert!(times <= 3, "{m} arrived {times} times: {got:?}");
    }
}

#[tokio::test]
async fn nacked_batches_are_sent_again_by_the_input() {
    // No retry wrapper and no client retries: the failed message goes back to the input,
    // which sends it again; nothing is lost.
    let got = through_failing_sink(vec![3, 4], "[]", 10).await;
    let expected: Vec<String> = (1..=10).map(|i| i.to_string()).collect();
    assert_at_least_once(got, &expected);
}

#[tokio::test]
async fn batches_sent_again_are_the_input_messages_not_the_processed_ones() {
    // A processor changes every message: after a failed write the input sends what it
    // read, so each message is processed once more from the start, never twice over.
    let processors = "[{mapping: 'root = content().string() + \"!\"'}]";
    let got = through_failing_sink(vec![2, 3], processors, 6).await;
    let expected: Vec<String> = (1..=6).map(|i| format!("{i}!")).collect();
    // Processed twice over would read "1!!".
    assert_at_least_once(got, &expected);
}

#[tokio::test]
async fn http_producer_gets_502_when_the_output_fails_and_200_once_delivered() {
    let sink = Sink::start(vec![1]).await;
    let config = format!(
        "http: {{address: 127.0.0.1:{{port}}}}\ninput:\n  http_server: {{path: /events}}\noutput:\n  http_client: {{url: '{}', retries: 0}}\n",
        sink.url()
    );
    let mut s = Sluice::start(&config).await;
    s.wait_up().await;
    let client = reqwest::Client::new();
    let first = client
        .post(s.url("/events"))
        .body("one")
        .send()
        .await
        .unwrap();
    assert_eq!(first.status(), 502);
    assert!(first.text().await.unwrap().contains("500"));
    let again = client
        .post(s.url("/events"))
        .body("one")
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 200);
    // Each request tried is one connection attempt: two writes, two attempts.
    let metrics = metrics_of(&s).await;
    let attempts: Vec<&str> = metrics
        .lines()
        .filter(|l| l.starts_with("sluice_output_connection_attempts_total{"))
        .collect();
    assert!(
        attempts.len() == 1 && attempts[0].ends_with(" 2"),
        "{attempts:?}"
    );
    let wrong = client.get(s.url("/events")).send().await.unwrap();
    assert_eq!(wrong.status(), 405);
    // Only the message the producer was told about (200) reached the sink: nothing it
    // believes delivered is missing.
    assert_eq!(sink.bodies(), vec!["one".to_string()]);
    s.signal("TERM");
    let (code, _, stderr) = s.finish().await;
    assert_eq!(code, 0, "{stderr}");
}

#[tokio::test]
async fn sigterm_drains_in_flight_requests_before_exit() {
    let config = "http: {address: 127.0.0.1:{port}}\nshutdown_timeout: 10s\ninput:\n  http_server: {path: /in}\npipeline:\n  processors:\n    - sleep: {duration: 300ms}\noutput:\n  file: {path: '{dir}/out.log'}\n";
    let mut s = Sluice::start(config).await;
    s.wait_up().await;
    let out = s.path("out.log");
    let client = reqwest::Client::new();
    let mut requests = Vec::new();
    for i in 0..5 {
        let req = client.post(s.url("/in")).body(format!("m{i}")).send();
        requests.push(tokio::spawn(req));
    }
    // Wait until all five are inside the stream, then ask sluice to stop.
    let metrics_url = s.url("/metrics");
    let start = std::time::Instant::now();
    loop {
        let text = client
            .get(&metrics_url)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        if text.contains("kind=\"input\",type=\"http_server\"} 5") {
            break;
        }
        assert!(
            start.elapsed() < common::DEADLINE,
            "requests never arrived: {text}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    s.signal("TERM");
    for r in requests {
        let resp = r.await.unwrap().unwrap();
        assert_eq!(resp.status(), 200);
    }
    let (code, _, stderr) = s.finish().await;
    assert_eq!(code, 0, "{stderr}");
    let mut got = read_lines(&out);
    got.sort();
    assert_eq!(got, vec!["m0", "m1", "m2", "m3", "m4"]);
}

#[tokio::test]
async fn shutdown_deadline_abandons_and_exits_non_zero() {
    // Nothing listens on port 1: the output never confirms.
    let config = "http: {address: 127.0.0.1:{port}}\nshutdown_timeout: 500ms\ninput:\n  generate: {payload: x, count: 1, interval: 0s}\noutput:\n  http_client: {url: 'http://127.0.0.1:1/', retries: 0}\n";
    let mut s = Sluice::start(config).await;
    s.wait_up().await;
    s.signal("INT");
    let (code, _, stderr) = s.finish().await;
    assert_eq!(code, 1);
    assert!(stderr.contains("undelivered"), "{stderr}");
}

#[tokio::test]
async fn ping_ready_and_metrics() {
    let config = "http: {address: 127.0.0.1:{port}}\ninput:\n  label: incoming\n  http_server: {path: /in}\noutput:\n  file: {path: '{dir}/out.log'}\n";
    let mut s = Sluice::start(config).await;
    s.wait_up().await;
    let client = reqwest::Client::new();
    let ready_url = s.url("/ready");
    let mut ready = false;
    for _ in 0..500 {
        if client.get(&ready_url).send().await.unwrap().status() == 200 {
            ready = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(ready, "/ready never became 200");
    assert_eq!(
        client
            .post(s.url("/in"))
            .body("a")
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    let metrics = metrics_of(&s).await;
    assert!(
        metrics.contains("sluice_component_received_messages_total{stream=\"config\",component=\"incoming\",kind=\"input\",type=\"http_server\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("sluice_component_sent_messages_total"),
        "{metrics}"
    );
    assert!(
        metrics.contains("sluice_component_latency_seconds_bucket"),
        "{metrics}"
    );
    assert_eq!(
        client.get(s.url("/nope")).send().await.unwrap().status(),
        404
    );
    s.signal("TERM");
    assert_eq!(s.finish().await.0, 0);
}

#[tokio::test]
async fn bad_config_fails_with_positioned_errors() {
    let config = "input:\n  generate:\n    payload: x\n    intervl: 1s\noutput:\n  stdot: {}\n";
    let mut s = Sluice::start(config).await;
    let (code, _, stderr) = s.finish().await;
    assert_eq!(code, 1);
    assert!(
        stderr.contains("config.yaml:4:5 (input.generate.intervl)"),
        "{stderr}"
    );
    assert!(stderr.contains("did you mean `interval`"), "{stderr}");
    assert!(
        stderr.contains("config.yaml:6:3 (output.stdot)"),
        "{stderr}"
    );
}

#[tokio::test]
async fn broker_fan_out_writes_every_message_to_every_output() {
    let config = "http: {enabled: false}\ninput:\n  generate: {payload: tick, count: 7, interval: 0s}\noutput:\n  broker:\n    pattern: fan_out\n    outputs:\n      - file: {path: '{dir}/a.log'}\n      - file: {path: '{dir}/b.log'}\n";
    let mut s = Sluice::start(config).await;
    let (a, b) = (s.path("a.log"), s.path("b.log"));
    let (code, _, stderr) = s.finish().await;
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(read_lines(&a).len(), 7);
    assert_eq!(read_lines(&b).len(), 7);
}

#[tokio::test]
async fn round_robin_splits_messages_between_outputs() {
    let config = "http: {enabled: false}\ninput:\n  generate: {payload: tick, count: 10, interval: 0s}\noutput:\n  broker:\n    pattern: round_robin\n    outputs:\n      - file: {path: '{dir}/a.log'}\n      - file: {path: '{dir}/b.log'}\n";
    let mut s = Sluice::start(config).await;
    let (a, b) = (s.path("a.log"), s.path("b.log"));
    let (code, _, stderr) = s.finish().await;
    assert_eq!(code, 0, "{stderr}");
    assert_eq!((read_lines(&a).len(), read_lines(&b).len()), (5, 5));
}

#[tokio::test]
async fn fallback_sends_refused_messages_to_the_dead_letter_output() {
    // The sink fails every request: everything lands in the dead-letter file.
    let sink = Sink::start((1..=100).collect()).await;
    let config = format!(
        "http: {{enabled: false}}\ninput:\n  generate: {{payload: dl, count: 3, interval: 0s}}\noutput:\n  fallback:\n    - http_client: {{url: '{}', retries: 0}}\n    - file: {{path: '{{dir}}/dead.log'}}\n",
        sink.url()
    );
    let mut s = Sluice::start(&config).await;
    let dead = s.path("dead.log");
    let (code, _, stderr) = s.finish().await;
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(read_lines(&dead), vec!["dl", "dl", "dl"]);
}

#[tokio::test]
async fn batching_groups_messages_by_count() {
    let config = "http: {enabled: false}\ninput:\n  generate: {payload: b, count: 10, interval: 0s}\noutput:\n  file:\n    path: '{dir}/out.log'\n    batching: {count: 4, period: 50ms}\n";
    let mut s = Sluice::start(config).await;
    let out = s.path("out.log");
    let (code, _, stderr) = s.finish().await;
    assert_eq!(code, 0, "{stderr}");
    // 4 + 4 + the last 2 flushed by the period or at the end.
    eventually("all ten lines", || read_lines(&out).len() == 10).await;
}

#[tokio::test]
async fn standalone_server_speaks_http1_and_http2_prior_knowledge() {
    let config = "http: {address: 127.0.0.1:{port}}\ninput:\n  http_server: {path: /in}\noutput:\n  drop: {}\n";
    let mut s = Sluice::start(config).await;
    s.wait_up().await;
    let h2 = reqwest::Client::builder()
        .http2_prior_knowledge()
        .build()
        .unwrap();
    let resp = h2.post(s.url("/in")).body("over h2").send().await.unwrap();
    assert_eq!(resp.version(), reqwest::Version::HTTP_2);
    assert_eq!(resp.status(), 200);
    let h1 = reqwest::Client::builder().http1_only().build().unwrap();
    let resp = h1.get(s.url("/ping")).send().await.unwrap();
    assert_eq!(resp.version(), reqwest::Version::HTTP_11);
    assert_eq!(resp.text().await.unwrap(), "pong");
    s.signal("TERM");
    assert_eq!(s.finish().await.0, 0);
}

#[tokio::test]
async fn a_stream_with_nothing_left_does_not_wait_for_an_output_that_cannot_connect() {
    // The input is empty and the output can never open its file (its directory would be
    // below a regular file): the stream has nothing to deliver and ends at once.
    let config = "http: {enabled: false}\ninput:\n  file: {paths: ['{dir}/empty.txt']}\noutput:\n  file: {path: '{dir}/config.yaml/out/x.log'}\n";
    let mut s = Sluice::start(config).await;
    std::fs::write(s.path("empty.txt"), "").unwrap();
    let (code, _, stderr) = s.finish().await;
    assert_eq!(code, 0, "{stderr}");
}

#[tokio::test]
async fn a_file_batch_that_fails_midway_is_sent_again_whole() {
    // 1000 lines reach the output in a few large batches; the 500th request fails, in
    // the middle of one. That batch goes again from its first message: nothing is lost,
    // and what it had delivered before the failure arrives a second time.
    let sink = Sink::start(vec![500]).await;
    let config = format!(
        "input:\n  file: {{paths: ['{{dir}}/in.log']}}\npipeline:\n  processors: [{{mapping: 'root = content().string() + \"!\"'}}]\noutput:\n  http_client: {{url: '{}', retries: 0, max_in_flight: 1}}\n",
        sink.url()
    );
    let mut s = Sluice::start_with(&config, Stdio::null()).await;
    std::fs::write(s.path("in.log"), lines(1000)).unwrap();
    let (code, _, stderr) = s.finish().await;
    assert_eq!(code, 0, "{stderr}");
    let got = sink.bodies();
    let mut unique: Vec<u32> = got
        .iter()
        .map(|b| b.trim_end_matches('!').parse().unwrap())
        .collect();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(unique, (1..=1000).collect::<Vec<u32>>(), "every line");
    assert!(got.iter().all(|b| b.ends_with('!') && !b.ends_with("!!")));
    // The 499 written before the failure include the head of the failed batch.
    assert!(
        got.len() > 1000,
        "the failed batch was not sent again whole"
    );
    assert_eq!(
        sink.requests.load(std::sync::atomic::Ordering::SeqCst),
        got.len() + 1
    );
}

#[tokio::test]
async fn content_types_go_from_the_producer_to_every_output() {
    let receiver = common::receiver::Receiver::start(&[], 200).await;
    let config = format!(
        "http: {{address: 127.0.0.1:{{port}}}}\ninput:\n  http_server: {{path: /in}}\noutput:\n  broker:\n    pattern: fan_out\n    outputs:\n      - http_client: {{url: '{}', retries: 0}}\n      - http_server: {{path: /next, stream_path: '', ws_path: ''}}\n",
        receiver.url("/hook")
    );
    let mut s = Sluice::start(&config).await;
    s.wait_up().await;
    let client = reqwest::Client::new();
    let cases: [(Option<&str>, &[u8], &str); 4] = [
        (Some("text/plain"), b"hello", "text/plain"),
        (None, b"{\"a\":1}", "application/json"),
        (None, b"plain words", "text/plain; charset=utf-8"),
        (None, b"\xff\xfe", "application/octet-stream"),
    ];
    for (i, (sent, body, want)) in cases.into_iter().enumerate() {
        // A consumer waits on the `path` route, then the producer sends.
        let next = tokio::spawn({
            let url = s.url("/next");
            let client = client.clone();
            async move { client.get(url).send().await.unwrap() }
        });
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        let mut post = client.post(s.url("/in")).body(body.to_vec());
        if let Some(t) = sent {
            post = post.header("content-type", t);
        }
        let r = post.send().await.unwrap();
        assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
        let got = next.await.unwrap();
        assert_eq!(got.headers()["content-type"], want, "case {i}");
        assert_eq!(&got.bytes().await.unwrap()[..], body);
        let hooked = receiver.received();
        assert_eq!(hooked.len(), i + 1);
        assert_eq!(hooked[i].header("content-type"), Some(want), "case {i}");
    }
    s.signal("TERM");
    assert_eq!(s.finish().await.0, 0);
}
