//! Every metric family edi-inbox writes, declared once: its name, type, help and labels. The
//! commands write through these ([`super::Metrics`] takes a [`Family`], never a name), and a
//! test checks that the alert rules, their promtool tests and the dashboard in `packaging/`
//! name only families declared here: a family renamed here and not there fails that test.

/// A metric family.
#[derive(Debug)]
pub struct Family {
    pub name: &'static str,
    pub kind: Kind,
    pub help: &'static str,
    /// The names of its labels, in the order its samples give them (none: one sample).
    pub labels: &'static [&'static str],
}

/// A family's Prometheus type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
        }
    }
}

// Every command

pub const LAST_RUN_EXIT_CODE: Family = Family {
    name: "edi_inbox_last_run_exit_code",
    kind: Kind::Gauge,
    help: "Exit status of the last run of each command: 0 all good, 1 fatal error (nothing decided), 2 usage error, 3 finished with something to look at.",
    labels: &["command"],
};

pub const LAST_RUN_TIMESTAMP_SECONDS: Family = Family {
    name: "edi_inbox_last_run_timestamp_seconds",
    kind: Kind::Gauge,
    help: "Unix time at which the last run of each command ended, however it ended.",
    labels: &["command"],
};

// ingest

pub const DATABASE_SIZE_BYTES: Family = Family {
    name: "edi_inbox_database_size_bytes",
    kind: Kind::Gauge,
    help: "Size of the inbox database file and its write-ahead log.",
    labels: &[],
};

pub const INBOX_ENTRIES: Family = Family {
    name: "edi_inbox_inbox_entries",
    kind: Kind::Gauge,
    help: "Entries in the inbox, the duplicate-detection window.",
    labels: &[],
};

pub const ACKNOWLEDGEMENTS: Family = Family {
    name: "edi_inbox_acknowledgements",
    kind: Kind::Gauge,
    help: "Answers the inbox holds, by standard, kind (CONTRL; TA1, 997, 999) and answer (positive, negative).",
    // In name order, as node_exporter serves them (a series is compared as written).
    labels: &["answer", "kind", "standard"],
};

pub const INGEST_INTERCHANGES_TOTAL: Family = Family {
    name: "edi_inbox_ingest_interchanges_total",
    kind: Kind::Counter,
    help: "Interchanges decided by edi-inbox ingest since the database was created, by outcome.",
    labels: &["status"],
};

pub const INGEST_LAST_RUN_DURATION_SECONDS: Family = Family {
    name: "edi_inbox_ingest_last_run_duration_seconds",
    kind: Kind::Gauge,
    help: "Wall time of the last ingest run.",
    labels: &[],
};

pub const INGEST_LAST_RUN_FILES: Family = Family {
    name: "edi_inbox_ingest_last_run_files",
    kind: Kind::Gauge,
    help: "Files the last ingest run read.",
    labels: &[],
};

pub const INGEST_LAST_RUN_INTERCHANGES: Family = Family {
    name: "edi_inbox_ingest_last_run_interchanges",
    kind: Kind::Gauge,
    help: "Outcomes of the last ingest run (skipped and unreadable files count once each).",
    labels: &["status"],
};

pub const INGEST_PATHS_MISSING: Family = Family {
    name: "edi_inbox_ingest_paths_missing",
    kind: Kind::Gauge,
    help: "Paths named to the last ingest run (drop folders, files, shell patterns that matched nothing) that did not exist: such a run reads nothing and exits 1.",
    labels: &[],
};

pub const INGEST_LAST_SUCCESS_TIMESTAMP_SECONDS: Family = Family {
    name: "edi_inbox_ingest_last_success_timestamp_seconds",
    kind: Kind::Gauge,
    help: "Unix time at which the last ingest run finished without a fatal error.",
    labels: &[],
};

// purge

pub const PURGE_ENTRIES_TOTAL: Family = Family {
    name: "edi_inbox_purge_entries_total",
    kind: Kind::Counter,
    help: "Inbox entries deleted by edi-inbox purge since the database was created.",
    labels: &[],
};

pub const PURGE_LAST_RUN_DURATION_SECONDS: Family = Family {
    name: "edi_inbox_purge_last_run_duration_seconds",
    kind: Kind::Gauge,
    help: "Wall time of the last purge run.",
    labels: &[],
};

pub const PURGE_LAST_RUN_ENTRIES: Family = Family {
    name: "edi_inbox_purge_last_run_entries",
    kind: Kind::Gauge,
    help: "Inbox entries deleted (or counted, with --dry-run) by the last purge run.",
    labels: &[],
};

pub const PURGE_LAST_SUCCESS_TIMESTAMP_SECONDS: Family = Family {
    name: "edi_inbox_purge_last_success_timestamp_seconds",
    kind: Kind::Gauge,
    help: "Unix time at which the last purge run finished.",
    labels: &[],
};

// publish

pub const OUTBOX_FAILED: Family = Family {
    name: "edi_inbox_outbox_failed",
    kind: Kind::Gauge,
    help: "Outbox events parked after --max-attempts refusals, by kind (message, contrl).",
    labels: &["kind"],
};

pub const OUTBOX_OLDEST_UNPUBLISHED_AGE_SECONDS: Family = Family {
    name: "edi_inbox_outbox_oldest_unpublished_age_seconds",
    kind: Kind::Gauge,
    help: "Age of the oldest unpublished outbox event (0 when there is none), by kind.",
    labels: &["kind"],
};

pub const OUTBOX_UNPUBLISHED: Family = Family {
    name: "edi_inbox_outbox_unpublished",
    kind: Kind::Gauge,
    help: "Outbox events not yet published (parked ones not counted), by kind (message, contrl).",
    labels: &["kind"],
};

pub const PUBLISH_EVENTS_TOTAL: Family = Family {
    name: "edi_inbox_publish_events_total",
    kind: Kind::Counter,
    help: "Outbox events published, refused, and parked by edi-inbox publish since the database was created.",
    labels: &["outcome"],
};

pub const PUBLISH_LAST_RUN_DURATION_SECONDS: Family = Family {
    name: "edi_inbox_publish_last_run_duration_seconds",
    kind: Kind::Gauge,
    help: "Wall time of the last publish run.",
    labels: &[],
};

pub const PUBLISH_LAST_RUN_EVENTS: Family = Family {
    name: "edi_inbox_publish_last_run_events",
    kind: Kind::Gauge,
    help: "Events (or interchanges) by outcome in the last publish run.",
    labels: &["outcome"],
};

pub const PUBLISH_LAST_SUCCESS_TIMESTAMP_SECONDS: Family = Family {
    name: "edi_inbox_publish_last_success_timestamp_seconds",
    kind: Kind::Gauge,
    help: "Unix time at which publish last got a batch through (with --follow, also a look at an empty outbox) without a destination error.",
    labels: &[],
};

// consume

pub const CONSUME_DELIVERIES_TOTAL: Family = Family {
    name: "edi_inbox_consume_deliveries_total",
    kind: Kind::Counter,
    help: "Deliveries edi-inbox consume took from a broker since the database was created.",
    labels: &[],
};

pub const CONSUME_LAG: Family = Family {
    name: "edi_inbox_consume_lag",
    kind: Kind::Gauge,
    help: "Records past the inbox's position, per partition this consumer reads: the high watermark of the last fetch minus the position. Below zero where the position is past the partition's end (the topic emptied, truncated, or created again).",
    labels: &["group", "topic", "partition"],
};

pub const CONSUME_LAST_BATCH_TIMESTAMP_SECONDS: Family = Family {
    name: "edi_inbox_consume_last_batch_timestamp_seconds",
    kind: Kind::Gauge,
    help: "Unix time at which a fetch of consume last worked: a batch taken, or nothing there to take (not while it is not subscribed).",
    labels: &[],
};

pub const CONSUME_LAST_SUCCESS_TIMESTAMP_SECONDS: Family = Family {
    name: "edi_inbox_consume_last_success_timestamp_seconds",
    kind: Kind::Gauge,
    help: "Unix time at which the last consume run finished without a fatal error.",
    labels: &[],
};

pub const CONSUME_POSITION: Family = Family {
    name: "edi_inbox_consume_position",
    kind: Kind::Gauge,
    help: "The offset of the next record to decide, per partition, as the inbox keeps it for the consumer group (Kafka).",
    labels: &["group", "topic", "partition"],
};

pub const CONSUME_REDELIVERED_TOTAL: Family = Family {
    name: "edi_inbox_consume_redelivered_total",
    kind: Kind::Counter,
    help: "Of those, deliveries the broker had delivered before (after a crash or a lost acknowledgement).",
    labels: &[],
};

pub const CONSUME_RUN_DELIVERIES: Family = Family {
    name: "edi_inbox_consume_run_deliveries",
    kind: Kind::Gauge,
    help: "Deliveries the current (or last) consume run took.",
    labels: &[],
};

pub const CONSUME_RUN_DURATION_SECONDS: Family = Family {
    name: "edi_inbox_consume_run_duration_seconds",
    kind: Kind::Gauge,
    help: "Wall time of the current (or last) consume run so far.",
    labels: &[],
};

pub const CONSUME_RUN_INTERCHANGES: Family = Family {
    name: "edi_inbox_consume_run_interchanges",
    kind: Kind::Gauge,
    help: "Outcomes of the current (or last) consume run so far.",
    labels: &["status"],
};

pub const CONSUME_RUN_OFFSET_COMMIT_FAILURES: Family = Family {
    name: "edi_inbox_consume_run_offset_commit_failures",
    kind: Kind::Gauge,
    help: "Commits of the positions to the broker (Kafka's offsets, which lag tools read) that failed in the current (or last) consume run: the inbox keeps the positions that matter; Kafka's trail until the next commit.",
    labels: &[],
};

pub const CONSUME_RUN_POSITIONS_LOST: Family = Family {
    name: "edi_inbox_consume_run_positions_lost",
    kind: Kind::Gauge,
    help: "Stored positions the current (or last) consume run found outside their partition's log (Kafka: the topic emptied, truncated, or deleted and created again without a topic id; records deleted before they were decided): --on-position-lost fail ended the run, earliest decided the records from the log's start.",
    labels: &[],
};

pub const CONSUME_RUN_SKIPPED: Family = Family {
    name: "edi_inbox_consume_run_skipped",
    kind: Kind::Gauge,
    help: "Records the current (or last) consume run skipped as decided before: below their partition's position (after a crash or a rebalance), never decided twice.",
    labels: &[],
};

pub const CONSUME_SUBSCRIBED: Family = Family {
    name: "edi_inbox_consume_subscribed",
    kind: Kind::Gauge,
    help: "1 while consume is subscribed to its source, 0 while it is not (the broker away, the queue or consumer gone) and tries again.",
    labels: &[],
};

// receive

pub const RECEIVE_LAST_REQUEST_TIMESTAMP_SECONDS: Family = Family {
    name: "edi_inbox_receive_last_request_timestamp_seconds",
    kind: Kind::Gauge,
    help: "Unix time at which receive last answered a request (0: none yet this run).",
    labels: &[],
};

pub const RECEIVE_LAST_SUCCESS_TIMESTAMP_SECONDS: Family = Family {
    name: "edi_inbox_receive_last_success_timestamp_seconds",
    kind: Kind::Gauge,
    help: "Unix time at which the last receive run ended without a fatal error.",
    labels: &[],
};

pub const RECEIVE_RUN_DURATION_SECONDS: Family = Family {
    name: "edi_inbox_receive_run_duration_seconds",
    kind: Kind::Gauge,
    help: "Wall time of the current (or last) receive run so far.",
    labels: &[],
};

pub const RECEIVE_RUN_ERRORS: Family = Family {
    name: "edi_inbox_receive_run_errors",
    kind: Kind::Gauge,
    help: "AS4 messages the current (or last) receive run refused, by ebMS error code.",
    labels: &["code"],
};

pub const RECEIVE_RUN_INTERCHANGES: Family = Family {
    name: "edi_inbox_receive_run_interchanges",
    kind: Kind::Gauge,
    help: "Outcomes of the interchanges the current (or last) receive run decided.",
    labels: &["status"],
};

pub const RECEIVE_RUN_REQUESTS: Family = Family {
    name: "edi_inbox_receive_run_requests",
    kind: Kind::Gauge,
    help: "AS4 requests of the current (or last) receive run, by how they were answered: receipt (decided now), resent (sent again: its stored receipt), refused (an ebMS error), failed (the inbox failed: HTTP 500, the sender tries again).",
    labels: &["status"],
};

pub const RECEIVE_RUN_MDN_DELIVERIES: Family = Family {
    name: "edi_inbox_receive_run_mdn_deliveries",
    kind: Kind::Gauge,
    help: "Tries at delivering AS2's asynchronous MDNs in the current (or last) receive run, by outcome: delivered (the partner's server took it), failed (tried again later, after 10 s, then twice as long each time, at most 10 minutes).",
    labels: &["outcome"],
};

pub const RECEIVE_MDNS_UNDELIVERED: Family = Family {
    name: "edi_inbox_receive_mdns_undelivered",
    kind: Kind::Gauge,
    help: "AS2 asynchronous MDNs committed and not yet taken by the partners' servers, as receive last read the inbox.",
    labels: &[],
};

pub const RECEIVE_MDN_OLDEST_UNDELIVERED_AGE_SECONDS: Family = Family {
    name: "edi_inbox_receive_mdn_oldest_undelivered_age_seconds",
    kind: Kind::Gauge,
    help: "How long the oldest undelivered AS2 asynchronous MDN has waited, in seconds (0 where none waits).",
    labels: &[],
};

pub const RECEIVE_CERTIFICATE_EXPIRY_TIMESTAMP_SECONDS: Family = Family {
    name: "edi_inbox_receive_certificate_expiry_timestamp_seconds",
    kind: Kind::Gauge,
    help: "When each certificate of --as4-config and --as2-config stops being valid (its notAfter), in seconds since 1970.",
    // In the order node_exporter serves them (by name), so that a series reads the same in the
    // file and as served.
    labels: &["certificate", "transport"],
};

/// Every family, for the checks.
#[cfg(test)]
pub const ALL: &[&Family] = &[
    &LAST_RUN_EXIT_CODE,
    &LAST_RUN_TIMESTAMP_SECONDS,
    &DATABASE_SIZE_BYTES,
    &INBOX_ENTRIES,
    &ACKNOWLEDGEMENTS,
    &INGEST_INTERCHANGES_TOTAL,
    &INGEST_LAST_RUN_DURATION_SECONDS,
    &INGEST_LAST_RUN_FILES,
    &INGEST_LAST_RUN_INTERCHANGES,
    &INGEST_LAST_SUCCESS_TIMESTAMP_SECONDS,
    &INGEST_PATHS_MISSING,
    &PURGE_ENTRIES_TOTAL,
    &PURGE_LAST_RUN_DURATION_SECONDS,
    &PURGE_LAST_RUN_ENTRIES,
    &PURGE_LAST_SUCCESS_TIMESTAMP_SECONDS,
    &OUTBOX_FAILED,
    &OUTBOX_OLDEST_UNPUBLISHED_AGE_SECONDS,
    &OUTBOX_UNPUBLISHED,
    &PUBLISH_EVENTS_TOTAL,
    &PUBLISH_LAST_RUN_DURATION_SECONDS,
    &PUBLISH_LAST_RUN_EVENTS,
    &PUBLISH_LAST_SUCCESS_TIMESTAMP_SECONDS,
    &CONSUME_DELIVERIES_TOTAL,
    &CONSUME_LAG,
    &CONSUME_LAST_BATCH_TIMESTAMP_SECONDS,
    &CONSUME_LAST_SUCCESS_TIMESTAMP_SECONDS,
    &CONSUME_POSITION,
    &CONSUME_REDELIVERED_TOTAL,
    &CONSUME_RUN_DELIVERIES,
    &CONSUME_RUN_DURATION_SECONDS,
    &CONSUME_RUN_INTERCHANGES,
    &CONSUME_RUN_OFFSET_COMMIT_FAILURES,
    &CONSUME_RUN_POSITIONS_LOST,
    &CONSUME_RUN_SKIPPED,
    &CONSUME_SUBSCRIBED,
    &RECEIVE_LAST_REQUEST_TIMESTAMP_SECONDS,
    &RECEIVE_LAST_SUCCESS_TIMESTAMP_SECONDS,
    &RECEIVE_RUN_DURATION_SECONDS,
    &RECEIVE_RUN_ERRORS,
    &RECEIVE_RUN_INTERCHANGES,
    &RECEIVE_RUN_REQUESTS,
    &RECEIVE_RUN_MDN_DELIVERIES,
    &RECEIVE_MDNS_UNDELIVERED,
    &RECEIVE_MDN_OLDEST_UNDELIVERED_AGE_SECONDS,
    &RECEIVE_CERTIFICATE_EXPIRY_TIMESTAMP_SECONDS,
];

#[cfg(test)]
mod tests {
    use super::*;

    /// Names are unique and Prometheus's own form, counters end in `_total`, and help is a
    /// sentence: what a scraper and an operator rely on.
    #[test]
    fn every_family_is_well_formed_and_declared_once() {
        let mut names = std::collections::HashSet::new();
        for f in ALL {
            assert!(names.insert(f.name), "{} is declared twice", f.name);
            assert!(
                f.name.starts_with("edi_inbox_")
                    && f.name.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'),
                "{} is not an edi_inbox_ name of lower-case letters and _",
                f.name
            );
            assert_eq!(
                f.kind == Kind::Counter,
                f.name.ends_with("_total"),
                "{}: counters, and only counters, end in _total",
                f.name
            );
            assert!(f.help.ends_with('.'), "{}: its help is a sentence", f.name);
        }
    }

    /// What the operator's monitoring reads (the alert rules, their promtool tests and the
    /// dashboard in `packaging/`) names only families declared here: a family renamed or
    /// dropped here and not there fails this test, not an alert that never fires.
    #[test]
    fn the_alerts_their_tests_and_the_dashboard_name_only_declared_families() {
        let declared: std::collections::HashSet<&str> = ALL.iter().map(|f| f.name).collect();
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("packaging");
        let files = [
            "prometheus/edi-inbox.rules.yml",
            "prometheus/edi-inbox.rules.test.yml",
            "prometheus/edi-inbox.rules.daily.test.yml",
            "grafana/edi-inbox.json",
        ];
        let mut unknown = Vec::new();
        for file in files {
            let text = std::fs::read_to_string(root.join(file))
                .unwrap_or_else(|e| panic!("cannot read packaging/{file}: {e}"));
            let mut named = 0;
            for (at, _) in text.match_indices("edi_inbox_") {
                let name: String = text[at..]
                    .chars()
                    .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                    .collect();
                named += 1;
                if !declared.contains(name.as_str()) {
                    unknown.push(format!("packaging/{file}: {name}"));
                }
            }
            assert!(
                named > 0,
                "packaging/{file} names no family: is it the file meant?"
            );
        }
        assert!(
            unknown.is_empty(),
            "names no family of src/metrics/catalogue.rs declares: {unknown:#?}"
        );
    }
}
