//! Exponential back-off with jitter, shared by everything that retries: the agent's reconnects,
//! the collector's ClickHouse writer and its alert sender.
//!
//! Each wait is a random point in the upper half of the current step, and the step doubles up to
//! a cap. Without the jitter, peers that failed together retry together: collectors whose quorum
//! inserts collided collide again, agents that lost one collector reconnect in one burst. The
//! caller supplies the random fraction, so this module stays pure (and its tests exact).

use std::time::Duration;

/// The step doubling from `initial` to `max`; [`Backoff::wait`] draws each wait from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    step: Duration,
}

impl Backoff {
    /// Starts at `initial` (a `max` below it is raised to it).
    pub fn new(initial: Duration, max: Duration) -> Backoff {
        Backoff { initial, max: max.max(initial), step: initial }
    }

    /// The wait before the next retry, `unit` ∈ [0, 1] (a uniform random draw) placing it in the
    /// upper half of the current step; then the step doubles, up to the cap.
    pub fn wait(&mut self, unit: f64) -> Duration {
        let wait = jittered(self.step, unit);
        self.step = self.step.saturating_mul(2).min(self.max);
        wait
    }

    /// Back to the first step (after a success).
    pub fn reset(&mut self) {
        self.step = self.initial;
    }

    /// The step the next wait is drawn from.
    pub fn step(&self) -> Duration {
        self.step
    }
}

/// A point in the upper half of `ceiling`: `ceiling × (1 + unit) / 2`, `unit` clamped to [0, 1]
/// (NaN counts as 0).
pub fn jittered(ceiling: Duration, unit: f64) -> Duration {
    let unit = if unit.is_nan() { 0.0 } else { unit.clamp(0.0, 1.0) };
    let half = ceiling / 2;
    half + (ceiling - half).mul_f64(unit)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn steps_double_to_the_cap_and_waits_stay_in_their_upper_half() {
        let mut b = Backoff::new(100 * MS, 5_000 * MS);
        let steps: Vec<u64> = (0..8)
            .map(|k| {
                let step = b.step();
                let unit = f64::from(k) / 7.0;
                let wait = b.wait(unit);
                assert!(wait >= step / 2 && wait <= step, "{wait:?} of {step:?}");
                step.as_millis() as u64
            })
            .collect();
        assert_eq!(steps, [100, 200, 400, 800, 1600, 3200, 5000, 5000]);
        b.reset();
        assert_eq!(b.step(), 100 * MS);
    }

    #[test]
    fn the_draw_places_the_wait_and_bad_draws_are_clamped() {
        assert_eq!(jittered(1_000 * MS, 0.0), 500 * MS);
        assert_eq!(jittered(1_000 * MS, 1.0), 1_000 * MS);
        assert_eq!(jittered(1_000 * MS, 0.5), 750 * MS);
        assert_eq!(jittered(1_000 * MS, -3.0), 500 * MS);
        assert_eq!(jittered(1_000 * MS, 7.0), 1_000 * MS);
        assert_eq!(jittered(1_000 * MS, f64::NAN), 500 * MS);
        assert_eq!(jittered(Duration::ZERO, 1.0), Duration::ZERO);
        // A cap below the start is raised to it; an enormous step saturates.
        let mut b = Backoff::new(MS, Duration::ZERO);
        assert_eq!((b.wait(1.0), b.wait(1.0)), (MS, MS));
        let mut huge = Backoff::new(Duration::MAX, Duration::MAX);
        assert!(huge.wait(1.0) == Duration::MAX && huge.step() == Duration::MAX);
    }
}
