//! librdkafka's batch produce call (`rd_kafka_produce_batch`), which the rdkafka crate's
//! safe API does not offer. Per record, the crate's `send` allocates the topic name as a
//! C string, looks the topic up under the client's lock and reads the clock twice; the
//! batch call does each once per batch. This module is the crate's only unsafe code: a
//! topic handle and one call, behind a safe API.
#![allow(unsafe_code)]

use std::ffi::{c_void, CString};
use std::ptr::NonNull;

use rdkafka::bindings::{
    rd_kafka_message_t, rd_kafka_produce_batch, rd_kafka_resp_err_t, rd_kafka_topic_destroy,
    rd_kafka_topic_new, rd_kafka_topic_t, RD_KAFKA_MSG_F_COPY,
};
use rdkafka::producer::{Producer, ProducerContext, ThreadedProducer};
use rdkafka::types::RDKafkaErrorCode;

/// librdkafka's "any partition: run the partitioner".
const PARTITION_UA: i32 = -1;

/// A handle on one topic of one producer. It keeps a clone of the producer, so the client
/// outlives the handle, as librdkafka requires.
pub struct TopicHandle<C: ProducerContext<DeliveryOpaque = usize> + 'static> {
    topic: NonNull<rd_kafka_topic_t>,
    _client: ThreadedProducer<C>,
}

// SAFETY: librdkafka's topic handles are reference-counted and thread-safe; the handle is
// only passed to librdkafka, which locks what it changes.
unsafe impl<C: ProducerContext<DeliveryOpaque = usize>> Send for TopicHandle<C> {}
// SAFETY: as above; `produce` takes `&self` and librdkafka serialises the enqueue.
unsafe impl<C: ProducerContext<DeliveryOpaque = usize>> Sync for TopicHandle<C> {}

/// One record for [`TopicHandle::produce`]: payload and optional key, both copied.
pub struct Record<'a> {
    pub payload: &'a [u8],
    pub key: Option<&'a [u8]>,
}

impl<C: ProducerContext<DeliveryOpaque = usize>> TopicHandle<C> {
    /// A handle on `topic` with the producer's topic settings. `None` if the name holds a
    /// NUL byte or librdkafka refuses it (the caller then sends record by record, which
    /// reports the error per record).
    pub fn new(producer: &ThreadedProducer<C>, topic: &str) -> Option<Self> {
        let name = CString::new(topic).ok()?;
        // SAFETY: the client pointer is valid while `producer` lives; a null configuration
        // asks for the client's default topic settings; the name is a valid C string that
        // librdkafka copies.
        let raw = unsafe {
            rd_kafka_topic_new(
                producer.client().native_ptr(),
                name.as_ptr(),
                std::ptr::null_mut(),
            )
        };
        Some(TopicHandle {
            topic: NonNull::new(raw)?,
            _client: producer.clone(),
        })
    }

    /// Hands `records` to librdkafka, in order, to `partition` (or the partitioner's pick),
    /// each carrying `opaque` for its delivery report. Returns, per record, `None` when
    /// librdkafka took it (a delivery report will come) or the error that kept it out (no
    /// report will come; `QueueFull` means: try again once reports drained the queue).
    pub fn produce<'a>(
        &self,
        records: impl IntoIterator<Item = Record<'a>>,
        partition: Option<i32>,
        opaque: usize,
    ) -> Vec<Option<RDKafkaErrorCode>> {
        let mut messages: Vec<rd_kafka_message_t> = records
            .into_iter()
            .map(|r| {
                let (key, key_len) = r.key.map_or((std::ptr::null_mut(), 0), |k| {
                    (k.as_ptr() as *mut c_void, k.len())
                });
                rd_kafka_message_t {
                    err: rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR,
                    rkt: std::ptr::null_mut(),
                    partition: 0,
                    // Read only: RD_KAFKA_MSG_F_COPY makes librdkafka copy payload and key.
                    payload: r.payload.as_ptr() as *mut c_void,
                    len: r.payload.len(),
                    key,
                    key_len,
                    offset: 0,
                    // The opaque is a plain number (the delivery context reads it back as
                    // a `usize`), never dereferenced.
                    _private: opaque as *mut c_void,
                }
            })
            .collect();
        // The call counts messages in a C int.
        for chunk in messages.chunks_mut(i32::MAX as usize) {
            // SAFETY: the topic handle is alive (destroyed only when `self` drops, before
            // the producer clone it holds); `chunk` is a valid array of `chunk.len()`
            // messages whose payload and key pointers stay valid for the call and are only
            // read (copied) by it; librdkafka writes nothing but each message's `err`.
            unsafe {
                rd_kafka_produce_batch(
                    self.topic.as_ptr(),
                    partition.unwrap_or(PARTITION_UA),
                    RD_KAFKA_MSG_F_COPY,
                    chunk.as_mut_ptr(),
                    chunk.len() as i32,
                );
            }
        }
        messages
            .iter()
            .map(|m| match m.err {
                rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR => None,
                e => Some(RDKafkaErrorCode::from(e)),
            })
            .collect()
    }
}

impl<C: ProducerContext<DeliveryOpaque = usize>> Drop for TopicHandle<C> {
    fn drop(&mut self) {
        // SAFETY: the handle came from `rd_kafka_topic_new` and is destroyed once, while
        // `self._client` (dropped after this) still keeps the client alive.
        unsafe { rd_kafka_topic_destroy(self.topic.as_ptr()) }
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use parking_lot::Mutex;
    use rdkafka::client::ClientContext;
    use rdkafka::config::FromClientConfigAndContext;
    use rdkafka::producer::DeliveryResult;
    use rdkafka::ClientConfig;

    use super::*;

    /// Delivery reports as (opaque, delivered).
    #[derive(Default)]
    struct Reports(Mutex<Vec<(usize, bool)>>);

    impl ClientContext for Reports {}

    impl ProducerContext for Reports {
        type DeliveryOpaque = usize;
        fn delivery(&self, result: &DeliveryResult<'_>, opaque: usize) {
            self.0.lock().push((opaque, result.is_ok()));
        }
    }

    /// A producer whose broker does not exist: librdkafka queues records and reports them
    /// failed once `message.timeout.ms` passed.
    fn producer(settings: &[(&str, &str)]) -> ThreadedProducer<Reports> {
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", "127.0.0.1:9")
            .set("message.timeout.ms", "200");
        for (k, v) in settings {
            c.set(*k, *v);
        }
        ThreadedProducer::from_config_and_context(&c, Reports::default()).unwrap()
    }

    fn records(payloads: &[Vec<u8>]) -> impl Iterator<Item = Record<'_>> {
        payloads.iter().map(|p| Record {
            payload: p,
            key: Some(b"k"),
        })
    }

    #[test]
    fn records_past_the_queues_room_come_back_as_queue_full() {
        let p = producer(&[("queue.buffering.max.messages", "10")]);
        let topic = TopicHandle::new(&p, "t").unwrap();
        let reports = p.context().clone();
        // The handle keeps the client (and its reports) alive on its own.
        drop(p);
        let payloads = vec![b"x".to_vec(); 25];
        let outcomes = topic.produce(records(&payloads), None, 7);
        assert!(outcomes[..10].iter().all(Option::is_none), "{outcomes:?}");
        assert!(
            outcomes[10..]
                .iter()
                .all(|o| *o == Some(RDKafkaErrorCode::QueueFull)),
            "{outcomes:?}"
        );
        // Exactly the ten records taken are reported, each with the opaque given.
        let deadline = Instant::now() + Duration::from_secs(10);
        while reports.0.lock().len() < 10 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(*reports.0.lock(), vec![(7, false); 10]);
    }

    #[test]
    fn an_oversized_record_is_refused_alone() {
        let p = producer(&[("message.max.bytes", "1000")]);
        let topic = TopicHandle::new(&p, "t").unwrap();
        let payloads = vec![b"a".to_vec(), vec![b'x'; 5000], b"c".to_vec()];
        let outcomes = topic.produce(records(&payloads), Some(0), 1);
        assert_eq!(
            outcomes,
            vec![None, Some(RDKafkaErrorCode::MessageSizeTooLarge), None]
        );
    }

    #[test]
    fn a_topic_name_with_a_nul_byte_has_no_handle() {
        let p = producer(&[]);
        assert!(TopicHandle::new(&p, "a\0b").is_none());
    }
}
