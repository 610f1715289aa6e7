//! An optional capability of a feed: a partitioned log read by a consumer group (Kafka today),
//! whose positions the inbox keeps and moves in the decisions' transaction. What every feed does
//! is in [`super::Feed`]; what only a log has (its group, the wait to join it, its partitions'
//! high watermarks, the commits of its offsets to the broker, the positions its log no longer
//! holds) is here, with the figures a run keeps of it and the metric families they are written
//! as: the command knows only that a feed may have a log.

use crate::inbox::{Inbox, StoredPosition};
use crate::metrics::{Metrics, catalogue};

/// A feed over a partitioned log ([`super::Feed::log`]).
pub trait PartitionedLog {
    /// The consumer group whose positions the inbox keeps for the feed's deliveries (those with
    /// a [`super::Delivery::position`]): decided only at or past the stored position.
    fn group(&self) -> &str;

    /// True while it waits for the broker to give it partitions (joining its group), for a
    /// bounded time after connecting: that wait is not idleness.
    fn joining(&self) -> bool;

    /// The commits of its positions to the broker that failed since it was last asked (Kafka's
    /// offsets, which lag tools read: the inbox keeps the positions that matter).
    fn take_commit_failures(&mut self) -> u64;

    /// The stored positions found outside their partition's log since it was last asked, and
    /// decided again from the log's start (`--on-position-lost earliest`; with `fail`, the
    /// fetch fails with [`super::PositionsLost`] instead).
    fn take_positions_lost(&mut self) -> u64;

    /// The high watermark (the offset after the last record) of each partition it reads, for
    /// the lag the metrics show, as its fetches last said (no request).
    fn high_watermarks(&self) -> Vec<(String, i32, i64)>;
}

/// What a run keeps of the log it reads, for its metrics: across the feed's reconnections.
#[derive(Debug)]
pub struct LogFigures {
    group: String,
    /// The high watermark of each partition, as the feed last knew it.
    watermarks: Vec<(String, i32, i64)>,
    /// Commits of the positions to the broker that failed this run.
    commit_failures: u64,
    /// Stored positions found outside their partition's log this run.
    positions_lost: u64,
}

impl LogFigures {
    pub fn new(group: &str) -> LogFigures {
        LogFigures {
            group: group.to_string(),
            watermarks: Vec::new(),
            commit_failures: 0,
            positions_lost: 0,
        }
    }

    /// Takes the log's counts since it was last asked (after a fetch, and after a settle: the
    /// answers to the commits after earlier batches come while later fetches poll).
    pub fn take_counts(&mut self, log: &mut dyn PartitionedLog) {
        self.commit_failures += log.take_commit_failures();
        self.positions_lost += log.take_positions_lost();
    }

    /// Takes the log's high watermarks: kept per partition, a partition the log knows none of
    /// now keeping the last (the log answers from what its fetches said, without a request, so
    /// this is asked after every step).
    pub fn look_at_watermarks(&mut self, log: &dyn PartitionedLog) {
        for (topic, partition, high) in log.high_watermarks() {
            match self
                .watermarks
                .iter_mut()
                .find(|w| w.0 == topic && w.1 == partition)
            {
                Some(w) => w.2 = high,
                None => self.watermarks.push((topic, partition, high)),
            }
        }
    }

    /// The log's metric families: the inbox's position and the lag per partition, the failed
    /// offset commits and lost positions of the run, and the records it `skipped` as decided
    /// before.
    pub fn write(&self, inbox: &dyn Inbox, skipped: usize, m: &mut Metrics) -> anyhow::Result<()> {
        let positions = inbox.positions(Some(&self.group))?;
        if !positions.is_empty() {
            m.family(&catalogue::CONSUME_POSITION);
            for p in &positions {
                let partition = p.partition.to_string();
                m.sample(
                    &catalogue::CONSUME_POSITION,
                    &[&p.group, &p.topic, &partition],
                    p.next_offset as f64,
                );
            }
        }
        let lags: Vec<(&StoredPosition, i64)> = positions
            .iter()
            .filter_map(|p| {
                self.watermarks
                    .iter()
                    .find(|w| w.0 == p.topic && w.1 == p.partition)
                    // Below zero where the position is past the log's end: never shown as 0.
                    .map(|w| (p, w.2 - p.next_offset))
            })
            .collect();
        if !lags.is_empty() {
            m.family(&catalogue::CONSUME_LAG);
            for (p, lag) in lags {
                let partition = p.partition.to_string();
                m.sample(
                    &catalogue::CONSUME_LAG,
                    &[&p.group, &p.topic, &partition],
                    lag as f64,
                );
            }
        }
        m.single(
            &catalogue::CONSUME_RUN_OFFSET_COMMIT_FAILURES,
            self.commit_failures as f64,
        );
        m.single(
            &catalogue::CONSUME_RUN_POSITIONS_LOST,
            self.positions_lost as f64,
        );
        m.single(&catalogue::CONSUME_RUN_SKIPPED, skipped as f64);
        Ok(())
    }
}
