//! A bounded queue between one producer side (the notifier) and one consumer (a target's sender):
//! [`BoundedQueue::push`] never waits — when the queue is full it drops the **oldest** waiting item
//! (the newest OOM is the most actionable; an old one may be stale by the time it would go) and
//! hands it back for counting. [`BoundedQueue::pop_batch`] waits for items. Memory is bounded by
//! the capacity.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::Notify;

/// A bounded queue that drops its oldest item when full.
#[derive(Debug)]
pub struct BoundedQueue<T> {
    items: Mutex<VecDeque<T>>,
    capacity: usize,
    ready: Notify,
    closed: AtomicBool,
}

impl<T> BoundedQueue<T> {
    /// An empty queue of at most `capacity` (≥ 1) items.
    pub fn new(capacity: usize) -> Self {
        BoundedQueue {
            items: Mutex::new(VecDeque::new()),
            capacity: capacity.max(1),
            ready: Notify::new(),
            closed: AtomicBool::new(false),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<T>> {
        // A panic while holding the lock leaves a consistent VecDeque: keep using it.
        self.items.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Appends `item`; when the queue is full, removes and returns the oldest item.
    pub fn push(&self, item: T) -> Option<T> {
        let dropped = {
            let mut items = self.lock();
            let dropped = if items.len() >= self.capacity { items.pop_front() } else { None };
            items.push_back(item);
            dropped
        };
        self.ready.notify_one();
        dropped
    }

    /// Waits until at least one item is queued and takes up to `max` (≥ 1) of them, oldest first;
    /// `None` once the queue is closed and empty.
    pub async fn pop_batch(&self, max: usize) -> Option<Vec<T>> {
        loop {
            let ready = self.ready.notified();
            {
                let mut items = self.lock();
                if !items.is_empty() {
                    let n = items.len().min(max.max(1));
                    return Some(items.drain(..n).collect());
                }
                if self.closed.load(Ordering::Acquire) {
                    return None;
                }
            }
            ready.await;
        }
    }

    /// Items waiting.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    /// No more items will come: the consumer takes what is left, then gets `None`.
    pub fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.ready.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[tokio::test]
    async fn full_queue_drops_the_oldest_and_batches_come_in_order() {
        let q = BoundedQueue::new(3);
        assert_eq!(q.push(1), None);
        assert_eq!(q.push(2), None);
        assert_eq!(q.push(3), None);
        assert_eq!(q.push(4), Some(1), "the oldest goes");
        assert_eq!(q.len(), 3);
        assert_eq!(q.pop_batch(2).await, Some(vec![2, 3]));
        assert_eq!(q.pop_batch(10).await, Some(vec![4]));
        q.close();
        assert_eq!(q.pop_batch(1).await, None);
    }

    #[tokio::test]
    async fn a_waiting_consumer_wakes_on_push_and_on_close() {
        let q = Arc::new(BoundedQueue::new(2));
        let consumer = {
            let q = q.clone();
            tokio::spawn(async move {
                let mut got = Vec::new();
                while let Some(batch) = q.pop_batch(8).await {
                    got.extend(batch);
                }
                got
            })
        };
        tokio::task::yield_now().await;
        q.push(7);
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        q.push(8);
        q.close();
        assert_eq!(consumer.await.unwrap(), vec![7, 8]);
    }
}
