//! A lock-free latency histogram (log-linear buckets, about 9 % wide),
//! cheap enough to record every plugin call; read for percentiles by the
//! `--until-idle` summary, benchmarks and metrics.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Sub-buckets per power of two.
const SUB: usize = 8;
/// Powers of two covered, in nanoseconds (2^42 ns is about 73 minutes).
const POWERS: usize = 42;
const BUCKETS: usize = POWERS * SUB;

pub struct LatencyHistogram {
    buckets: Box<[AtomicU64]>,
    count: AtomicU64,
    sum_ns: AtomicU64,
}

impl std::fmt::Debug for LatencyHistogram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LatencyHistogram")
            .field("count", &self.count())
            .field("p50", &self.quantile(0.5))
            .field("p99", &self.quantile(0.99))
            .finish()
    }
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        Self {
            buckets: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
            count: AtomicU64::new(0),
            sum_ns: AtomicU64::new(0),
        }
    }
}

fn index(ns: u64) -> usize {
    if ns < SUB as u64 {
        return ns as usize;
    }
    let power = 63 - ns.leading_zeros() as usize; // floor(log2)
    let shift = power.saturating_sub(3);
    let mantissa = ((ns >> shift) as usize) & (SUB - 1);
    (power * SUB + mantissa).min(BUCKETS - 1)
}

/// The largest value (ns) a bucket holds.
fn upper(index: usize) -> u64 {
    if index < SUB {
        return index as u64;
    }
    let power = index / SUB;
    let mantissa = (index % SUB) as u64;
    let shift = power.saturating_sub(3);
    ((SUB as u64 + mantissa + 1) << shift).saturating_sub(1)
}

impl LatencyHistogram {
    pub fn record(&self, d: Duration) {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        if let Some(b) = self.buckets.get(index(ns)) {
            b.fetch_add(1, Ordering::Relaxed);
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_ns.fetch_add(ns, Ordering::Relaxed);
    }

    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    pub fn sum(&self) -> Duration {
        Duration::from_nanos(self.sum_ns.load(Ordering::Relaxed))
    }

    /// The `q` quantile (0..=1), as its bucket's upper bound; `None` when
    /// nothing was recorded.
    pub fn quantile(&self, q: f64) -> Option<Duration> {
        let total: u64 = self.buckets.iter().map(|b| b.load(Ordering::Relaxed)).sum();
        if total == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, b) in self.buckets.iter().enumerate() {
            seen += b.load(Ordering::Relaxed);
            if seen >= rank {
                return Some(Duration::from_nanos(upper(i)));
            }
        }
        None
    }

    /// Counts per bucket of `bounds_ns` (ascending upper bounds) plus one
    /// overflow slot, and their total: each internal bucket goes to the
    /// first bound at or above its upper edge.
    pub fn bucket_counts(&self, bounds_ns: &[u64]) -> (Vec<u64>, u64) {
        let mut out = vec![0; bounds_ns.len() + 1];
        let mut total = 0;
        for (i, b) in self.buckets.iter().enumerate() {
            let n = b.load(Ordering::Relaxed);
            if n == 0 {
                continue;
            }
            let slot = bounds_ns.partition_point(|bound| *bound < upper(i));
            out[slot] += n;
            total += n;
        }
        (out, total)
    }

    /// Clears every bucket (benchmarks measure phases separately).
    pub fn reset(&self) {
        for b in self.buckets.iter() {
            b.store(0, Ordering::Relaxed);
        }
        self.count.store(0, Ordering::Relaxed);
        self.sum_ns.store(0, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_contiguous_and_within_a_seventh() {
        let mut samples: Vec<u64> = (0..5_000).collect();
        samples.extend([12_345, 999_999, 1_000_000, 3_000_000_000, 1 << 40]);
        for ns in samples {
            let i = index(ns);
            assert!(upper(i) >= ns, "{ns} above bucket {i} bound {}", upper(i));
            if ns >= 16 {
                assert!(
                    (upper(i) - ns) as f64 <= ns as f64 / 7.0,
                    "{ns} -> {}",
                    upper(i)
                );
            }
            if ns > 0 && index(ns - 1) != i {
                assert!(index(ns - 1) < i);
                assert_eq!(upper(index(ns - 1)), ns - 1, "a gap below {ns}");
            }
        }
    }

    #[test]
    fn quantiles_follow_the_recorded_distribution() {
        let h = LatencyHistogram::default();
        assert_eq!(h.quantile(0.5), None);
        for us in 1..=100u64 {
            h.record(Duration::from_micros(us));
        }
        let p50 = h.quantile(0.5).unwrap().as_nanos() as f64;
        let p99 = h.quantile(0.99).unwrap().as_nanos() as f64;
        assert!((50_000.0..=56_000.0).contains(&p50), "{p50}");
        assert!((99_000.0..=108_000.0).contains(&p99), "{p99}");
        assert_eq!(h.count(), 100);
        // 1..=100 us against bounds 10 us and 50 us: a sample counts under
        // a bound only when its whole internal bucket is below the bound.
        let (counts, total) = h.bucket_counts(&[10_000, 50_000]);
        assert_eq!(total, 100);
        assert_eq!(counts.iter().sum::<u64>(), 100);
        assert!((9..=10).contains(&counts[0]), "{counts:?}");
        assert!((45..=50).contains(&(counts[0] + counts[1])), "{counts:?}");
        h.reset();
        assert_eq!(h.count(), 0);
    }
}
