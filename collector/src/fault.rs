//! Test-only fault points: places in the collector where a test can make it "crash" (stop at
//! once, as if the process died there) to prove that results stay exactly-once.
//!
//! [`FaultPoint`] names the places; it exists in every build so the call sites need no `cfg`.
//! Arming and firing ([`arm`], [`fired`]) are compiled only with the `fault-injection` feature
//! (enabled for the crate's own tests): a production build has no way to trigger a fault, and its
//! `fires` check is a constant `false`.

/// A place where an injected crash can happen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FaultPoint {
    /// In the ClickHouse writer, after a flush's sample and event inserts committed and before
    /// its `agents` row (the commit record of the batches' sequence numbers) is written.
    AfterSamplesBeforeAgents,
    /// After a whole flush is stored (`agents` row included) and before any of its batches is
    /// acknowledged.
    AfterStoreBeforeAck,
}

#[cfg(any(test, feature = "fault-injection"))]
mod armed {
    use std::sync::{Mutex, PoisonError};

    use super::FaultPoint;

    /// One armed fault: fires for `collector_id` at `point` on its `(skip + 1)`-th pass.
    #[derive(Debug)]
    struct Armed {
        collector_id: String,
        point: FaultPoint,
        skip: u64,
        fired: bool,
    }

    static ARMED: Mutex<Vec<Armed>> = Mutex::new(Vec::new());

    /// Arms `point` for the collector with this `collector_id`: the first `skip` passes go
    /// through, the next one fires (once). Collectors with other ids are not affected, so tests in
    /// one process do not disturb each other.
    pub fn arm(collector_id: &str, point: FaultPoint, skip: u64) {
        let mut armed = ARMED.lock().unwrap_or_else(PoisonError::into_inner);
        armed.retain(|a| !(a.collector_id == collector_id && a.point == point));
        armed.push(Armed { collector_id: collector_id.to_owned(), point, skip, fired: false });
    }

    /// True once the armed fault of `collector_id` at `point` has fired.
    pub fn fired(collector_id: &str, point: FaultPoint) -> bool {
        let armed = ARMED.lock().unwrap_or_else(PoisonError::into_inner);
        armed.iter().any(|a| a.collector_id == collector_id && a.point == point && a.fired)
    }

    /// Called at the fault point: true when the collector must crash here.
    pub(crate) fn fires(collector_id: &str, point: FaultPoint) -> bool {
        let mut armed = ARMED.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(a) =
            armed.iter_mut().find(|a| a.collector_id == collector_id && a.point == point && !a.fired)
        else {
            return false;
        };
        if a.skip > 0 {
            a.skip -= 1;
            return false;
        }
        a.fired = true;
        true
    }
}

#[cfg(any(test, feature = "fault-injection"))]
pub use armed::{arm, fired};

#[cfg(any(test, feature = "fault-injection"))]
pub(crate) use armed::fires;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_armed_fault_fires_once_after_its_skips_for_its_collector_only() {
        arm("c1", FaultPoint::AfterStoreBeforeAck, 2);
        assert!(!fires("c2", FaultPoint::AfterStoreBeforeAck));
        assert!(!fires("c1", FaultPoint::AfterSamplesBeforeAgents));
        assert!(!fires("c1", FaultPoint::AfterStoreBeforeAck));
        assert!(!fires("c1", FaultPoint::AfterStoreBeforeAck));
        assert!(!fired("c1", FaultPoint::AfterStoreBeforeAck));
        assert!(fires("c1", FaultPoint::AfterStoreBeforeAck));
        assert!(fired("c1", FaultPoint::AfterStoreBeforeAck));
        assert!(!fires("c1", FaultPoint::AfterStoreBeforeAck), "fires once");
    }
}
