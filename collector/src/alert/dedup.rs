//! The events a target was already given ([`RecentKeys`]): a bounded set with a time to live, so
//! an event that reaches the senders twice (attributed by two collectors at once, or seen again
//! before its row became visible) alerts once. At most `capacity` keys, each kept at most `ttl`;
//! the oldest go first. Alertmanager deduplicates by label set anyway; webhooks do not.

use std::collections::{HashSet, VecDeque};
use std::hash::Hash;
use std::time::{Duration, Instant};

/// A bounded, expiring set of keys.
#[derive(Debug)]
pub struct RecentKeys<K> {
    seen: HashSet<K>,
    order: VecDeque<(K, Instant)>,
    capacity: usize,
    ttl: Duration,
}

impl<K: Clone + Eq + Hash> RecentKeys<K> {
    /// An empty set of at most `capacity` (≥ 1) keys, each remembered for `ttl`.
    pub fn new(capacity: usize, ttl: Duration) -> Self {
        RecentKeys { seen: HashSet::new(), order: VecDeque::new(), capacity: capacity.max(1), ttl }
    }

    /// Remembers `key` at `now`: `true` when it is new (not seen within the time to live).
    pub fn insert(&mut self, key: &K, now: Instant) -> bool {
        while let Some((k, at)) = self.order.front() {
            if now.saturating_duration_since(*at) < self.ttl {
                break;
            }
            self.seen.remove(k);
            self.order.pop_front();
        }
        if self.seen.contains(key) {
            return false;
        }
        if self.order.len() >= self.capacity
            && let Some((oldest, _)) = self.order.pop_front()
        {
            self.seen.remove(&oldest);
        }
        self.seen.insert(key.clone());
        self.order.push_back((key.clone(), now));
        true
    }

    /// Keys remembered now.
    pub fn len(&self) -> usize {
        self.order.len()
    }

    /// Whether no key is remembered.
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_new_once_within_the_ttl_and_the_set_is_bounded() {
        let t0 = Instant::now();
        let mut r = RecentKeys::new(3, Duration::from_secs(10));
        assert!(r.insert(&1, t0));
        assert!(!r.insert(&1, t0 + Duration::from_secs(1)), "seen again within the ttl");
        assert!(r.insert(&2, t0) && r.insert(&3, t0) && r.insert(&4, t0));
        assert_eq!(r.len(), 3, "bounded: the oldest key went");
        assert!(r.insert(&1, t0 + Duration::from_secs(2)), "forgotten when the set was full");
        assert!(r.insert(&2, t0 + Duration::from_secs(11)), "expired");
        assert!(r.len() <= 3);
    }
}
