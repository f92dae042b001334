//! The writer's one deadline scheduler: live leases with their monotonic deadlines, and
//! FIFO queues of waiters, some with a deadline, all behind one lazy-deletion heap.
//! Generic over the lease key `LK` and what a lease carries `L`, the queue family `F`
//! (e.g. waiting to acquire vs. waiting to be told), the queue key `QK` and a waiter's
//! payload `W`; it holds no SQL and knows nothing of locks or tasks.
//!
//! Every tracked lease and every waiter with a deadline pushes one heap entry. An entry is
//! current while its lease is still tracked by that same `track` (re-tracking, as on a
//! heartbeat, makes the old entry stale) or its waiter is still queued; stale entries are
//! skipped when they come up, and dropped in bulk by `compact`.
//!
//! A queue, once made, stays (perhaps empty) until `remove_queue`: whether an empty queue
//! still means something is its user's call.

use std::borrow::Borrow;
use std::cmp::Reverse;
use std::collections::{hash_map, vec_deque, BinaryHeap, HashMap, VecDeque};
use std::hash::Hash;
use std::time::Duration;

/// A tracked lease.
pub struct Lease<L> {
    pub lease_id: String,
    pub deadline: Duration,
    pub data: L,
    /// Which `track` made it: only that call's heap entry is current.
    ticket: u64,
}

/// What came due.
#[derive(Debug, PartialEq, Eq)]
pub enum Due<LK, W> {
    /// The lease's deadline passed; it is still tracked (its user ends and forgets it).
    Lease(LK),
    /// The waiter's deadline passed; it has left its queue.
    Wait(W),
}

struct Waiting<W> {
    id: u64,
    payload: W,
}

/// The queues of one family.
struct Family<F, QK, W> {
    name: F,
    /// Waiters in all its queues.
    queued: usize,
    queues: HashMap<QK, VecDeque<Waiting<W>>>,
}

/// Ordered so that, at the same instant, leases come due before waits.
#[derive(PartialEq, Eq, PartialOrd, Ord)]
enum Entry<LK, F, QK> {
    Lease(LK, u64),
    Wait(F, QK, u64),
}

/// Earliest first.
type Deadlines<LK, F, QK> = BinaryHeap<Reverse<(Duration, Entry<LK, F, QK>)>>;

pub struct Schedule<LK, L, F, QK, W> {
    leases: HashMap<LK, Lease<L>>,
    /// Sorted by family.
    families: Vec<Family<F, QK, W>>,
    deadlines: Deadlines<LK, F, QK>,
    queued: usize,
    next_id: u64,
}

impl<LK, L, F, QK, W> Default for Schedule<LK, L, F, QK, W> {
    fn default() -> Self {
        Schedule {
            leases: HashMap::new(),
            families: Vec::new(),
            deadlines: BinaryHeap::new(),
            queued: 0,
            next_id: 0,
        }
    }
}

/// Waiters taken out of the schedule, oldest first.
pub struct Taken<W>(vec_deque::IntoIter<Waiting<W>>);

impl<W> Iterator for Taken<W> {
    type Item = W;

    fn next(&mut self) -> Option<W> {
        self.0.next().map(|w| w.payload)
    }
}

/// Where waiter `id` is in a queue: ids only grow and queues keep their order, so every
/// queue is sorted by id.
fn position<W>(queue: &VecDeque<Waiting<W>>, id: u64) -> Option<usize> {
    queue.binary_search_by_key(&id, |w| w.id).ok()
}

impl<LK, L, F, QK, W> Schedule<LK, L, F, QK, W>
where
    LK: Hash + Eq + Ord + Clone,
    F: Copy + Ord,
    QK: Hash + Eq + Ord + Clone,
{
    fn next_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    // Leases.

    /// Tracks the lease on `key` until `deadline`, replacing any lease it had.
    pub fn track(&mut self, key: LK, lease_id: String, deadline: Duration, data: L) {
        let ticket = self.next_id();
        self.deadlines
            .push(Reverse((deadline, Entry::Lease(key.clone(), ticket))));
        self.leases.insert(
            key,
            Lease {
                lease_id,
                deadline,
                data,
                ticket,
            },
        );
    }

    pub fn lease<Q>(&self, key: &Q) -> Option<&Lease<L>>
    where
        LK: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.leases.get(key)
    }

    /// Stops tracking the lease on `key`; its heap entry goes stale.
    pub fn forget<Q>(&mut self, key: &Q) -> Option<Lease<L>>
    where
        LK: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.leases.remove(key)
    }

    /// Leases tracked.
    pub fn leases(&self) -> usize {
        self.leases.len()
    }

    /// Stops tracking every lease (to track them again from the table).
    pub fn drain_leases(&mut self) -> hash_map::Drain<'_, LK, Lease<L>> {
        self.deadlines
            .retain(|Reverse((_, entry))| !matches!(entry, Entry::Lease(..)));
        self.leases.drain()
    }

    // Queues.

    fn family(&self, family: F) -> Option<&Family<F, QK, W>> {
        self.families.iter().find(|f| f.name == family)
    }

    fn family_mut(&mut self, family: F) -> Option<&mut Family<F, QK, W>> {
        self.families.iter_mut().find(|f| f.name == family)
    }

    fn queue<Q>(&self, family: F, queue: &Q) -> Option<&VecDeque<Waiting<W>>>
    where
        QK: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.family(family)?.queues.get(queue)
    }

    /// Removes the waiter at `index` of a queue, counting it out.
    fn take<Q>(
        &mut self,
        family: F,
        queue: &Q,
        index: impl FnOnce(&VecDeque<Waiting<W>>) -> Option<usize>,
    ) -> Option<W>
    where
        QK: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let f = self.family_mut(family)?;
        let q = f.queues.get_mut(queue)?;
        let waiter = q.remove(index(q)?)?;
        f.queued -= 1;
        self.queued -= 1;
        Some(waiter.payload)
    }

    /// Queues `payload` last in `queue` of `family`, until `deadline` if any; returns its id.
    pub fn enqueue(&mut self, family: F, queue: QK, deadline: Option<Duration>, payload: W) -> u64 {
        let id = self.next_id();
        if let Some(at) = deadline {
            self.deadlines
                .push(Reverse((at, Entry::Wait(family, queue.clone(), id))));
        }
        let at = match self.families.binary_search_by(|f| f.name.cmp(&family)) {
            Ok(at) => at,
            Err(at) => {
                self.families.insert(
                    at,
                    Family {
                        name: family,
                        queued: 0,
                        queues: HashMap::new(),
                    },
                );
                at
            }
        };
        let f = &mut self.families[at];
        f.queues
            .entry(queue)
            .or_default()
            .push_back(Waiting { id, payload });
        f.queued += 1;
        self.queued += 1;
        id
    }

    /// Whether the queue exists (it may be empty).
    pub fn has_queue<Q>(&self, family: F, queue: &Q) -> bool
    where
        QK: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.queue(family, queue).is_some()
    }

    /// The keys of the family's queues.
    pub fn queue_keys(&self, family: F) -> impl Iterator<Item = &QK> + '_ {
        self.family(family)
            .into_iter()
            .flat_map(|f| f.queues.keys())
    }

    /// The queue's waiters, first first.
    pub fn waiters<'a, Q>(&'a self, family: F, queue: &Q) -> impl Iterator<Item = &'a W> + 'a
    where
        QK: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.queue(family, queue)
            .into_iter()
            .flat_map(|q| q.iter().map(|w| &w.payload))
    }

    /// The waiter at `index` of the queue.
    pub fn get<Q>(&self, family: F, queue: &Q, index: usize) -> Option<&W>
    where
        QK: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.queue(family, queue)?.get(index).map(|w| &w.payload)
    }

    pub fn front<Q>(&self, family: F, queue: &Q) -> Option<&W>
    where
        QK: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.get(family, queue, 0)
    }

    pub fn pop_front<Q>(&mut self, family: F, queue: &Q) -> Option<W>
    where
        QK: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.take(family, queue, |_| Some(0))
    }

    /// Removes the waiter at `index` of the queue; those behind it move up.
    pub fn remove_at<Q>(&mut self, family: F, queue: &Q, index: usize) -> Option<W>
    where
        QK: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.take(family, queue, |_| Some(index))
    }

    /// Removes waiter `id` from the queue.
    pub fn remove<Q>(&mut self, family: F, queue: &Q, id: u64) -> Option<W>
    where
        QK: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.take(family, queue, |q| position(q, id))
    }

    /// Removes the queue and its waiters.
    pub fn remove_queue<Q>(&mut self, family: F, queue: &Q) -> Taken<W>
    where
        QK: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let mut taken = VecDeque::new();
        if let Some(f) = self.family_mut(family) {
            if let Some(q) = f.queues.remove(queue) {
                f.queued -= q.len();
                self.queued -= q.len();
                taken = q;
            }
        }
        Taken(taken.into_iter())
    }

    /// Keeps, in one queue, only the waiters `keep` says yes to.
    pub fn retain_in<Q>(&mut self, family: F, queue: &Q, mut keep: impl FnMut(&W) -> bool)
    where
        QK: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let Some(f) = self.family_mut(family) else {
            return;
        };
        let Some(q) = f.queues.get_mut(queue) else {
            return;
        };
        let before = q.len();
        q.retain(|w| keep(&w.payload));
        let gone = before - q.len();
        f.queued -= gone;
        self.queued -= gone;
    }

    /// Keeps, in every queue, only the waiters `keep` says yes to (queues stay, even empty).
    pub fn retain(&mut self, mut keep: impl FnMut(&W) -> bool) {
        for f in &mut self.families {
            for q in f.queues.values_mut() {
                let before = q.len();
                q.retain(|w| keep(&w.payload));
                let gone = before - q.len();
                f.queued -= gone;
                self.queued -= gone;
            }
        }
    }

    /// Takes, out of every queue, the waiters `take` says yes to (queues stay, even
    /// empty); their deadlines lapse unused.
    pub fn take_where(&mut self, mut take: impl FnMut(&W) -> bool) -> Vec<W> {
        let mut taken = Vec::new();
        for f in &mut self.families {
            for q in f.queues.values_mut() {
                let before = q.len();
                let (out, kept): (VecDeque<_>, VecDeque<_>) =
                    q.drain(..).partition(|w| take(&w.payload));
                *q = kept;
                let gone = before - q.len();
                f.queued -= gone;
                self.queued -= gone;
                taken.extend(out.into_iter().map(|w| w.payload));
            }
        }
        taken
    }

    /// Waiters in all queues.
    pub fn queued(&self) -> usize {
        self.queued
    }

    /// Waiters in the family's queues.
    pub fn queued_in(&self, family: F) -> usize {
        self.family(family).map_or(0, |f| f.queued)
    }

    /// Removes every queue; their waiters, family by family.
    pub fn drain_waiters(&mut self) -> Vec<W> {
        self.deadlines
            .retain(|Reverse((_, entry))| !matches!(entry, Entry::Wait(..)));
        self.queued = 0;
        std::mem::take(&mut self.families)
            .into_iter()
            .flat_map(|f| f.queues.into_values())
            .flatten()
            .map(|w| w.payload)
            .collect()
    }

    // Deadlines.

    fn is_current(&self, at: Duration, entry: &Entry<LK, F, QK>) -> bool {
        match entry {
            Entry::Lease(key, ticket) => self
                .leases
                .get(key)
                .is_some_and(|l| l.ticket == *ticket && l.deadline == at),
            Entry::Wait(family, queue, id) => self
                .queue(*family, queue)
                .is_some_and(|q| position(q, *id).is_some()),
        }
    }

    /// The earliest deadline still pending, if any.
    pub fn next_deadline(&mut self) -> Option<Duration> {
        while let Some(Reverse((at, entry))) = self.deadlines.peek() {
            if self.is_current(*at, entry) {
                return Some(*at);
            }
            self.deadlines.pop();
        }
        None
    }

    /// The next lease or waiter whose deadline is `now` or earlier, earliest first (at the
    /// same instant: leases first, then waiters by family, queue and age). A waiter that
    /// comes due leaves its queue; a lease stays tracked.
    pub fn pop_due(&mut self, now: Duration) -> Option<Due<LK, W>> {
        loop {
            let at = self.next_deadline()?;
            if at > now {
                return None;
            }
            let Reverse((_, entry)) = self.deadlines.pop()?;
            match entry {
                Entry::Lease(key, _) => return Some(Due::Lease(key)),
                Entry::Wait(family, queue, id) => {
                    if let Some(waiter) = self.remove(family, &queue, id) {
                        return Some(Due::Wait(waiter));
                    }
                }
            }
        }
    }

    /// Drops stale heap entries (left by heartbeats and answered waits) once they
    /// outnumber the live ones.
    pub fn compact(&mut self) {
        let live = self.leases.len() + self.queued;
        if self.deadlines.len() > 2 * live + 1024 {
            let entries = std::mem::take(&mut self.deadlines).into_vec();
            self.deadlines = entries
                .into_iter()
                .filter(|Reverse((at, entry))| self.is_current(*at, entry))
                .collect();
        }
    }

    /// Heap entries, stale ones included.
    #[cfg(test)]
    fn entries(&self) -> usize {
        self.deadlines.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
    enum Fam {
        Take,
        Watch,
    }

    type S = Schedule<String, u32, Fam, String, &'static str>;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn all_due(s: &mut S, now: Duration) -> Vec<Due<String, &'static str>> {
        std::iter::from_fn(|| s.pop_due(now)).collect()
    }

    #[test]
    fn queues_are_first_come_first_served() {
        let mut s = S::default();
        for w in ["a", "b", "c"] {
            s.enqueue(Fam::Take, "k".into(), None, w);
        }
        s.enqueue(Fam::Take, "other".into(), None, "x");
        assert_eq!(
            s.waiters(Fam::Take, "k").copied().collect::<Vec<_>>(),
            ["a", "b", "c"]
        );
        assert_eq!(s.front(Fam::Take, "k"), Some(&"a"));
        assert_eq!(s.pop_front(Fam::Take, "k"), Some("a"));
        assert_eq!(s.get(Fam::Take, "k", 1), Some(&"c"));
        assert_eq!(s.remove_at(Fam::Take, "k", 0), Some("b"));
        assert_eq!(s.pop_front(Fam::Take, "k"), Some("c"));
        assert_eq!(s.pop_front(Fam::Take, "k"), None);
        // An emptied queue stays until removed.
        assert!(s.has_queue(Fam::Take, "k"));
        assert!(!s.has_queue(Fam::Watch, "k"));
        assert_eq!(s.remove_queue(Fam::Take, "k").count(), 0);
        assert!(!s.has_queue(Fam::Take, "k"));
        assert_eq!(s.queued(), 1);
    }

    #[test]
    fn families_are_separate_queues_counted_apart() {
        let mut s = S::default();
        s.enqueue(Fam::Watch, "k".into(), Some(ms(5)), "w1");
        s.enqueue(Fam::Take, "k".into(), Some(ms(5)), "t1");
        s.enqueue(Fam::Watch, "k".into(), None, "w2");
        assert_eq!(s.queued_in(Fam::Take), 1);
        assert_eq!(s.queued_in(Fam::Watch), 2);
        assert_eq!(s.queued(), 3);
        assert_eq!(s.queue_keys(Fam::Watch).collect::<Vec<_>>(), ["k"]);
        assert_eq!(
            s.remove_queue(Fam::Watch, "k").collect::<Vec<_>>(),
            ["w1", "w2"]
        );
        assert_eq!(s.queued_in(Fam::Watch), 0);
        assert_eq!(s.waiters(Fam::Take, "k").collect::<Vec<_>>(), [&"t1"]);
        // Waits due at the same instant: family by family, as the family type orders them.
        s.enqueue(Fam::Watch, "a".into(), Some(ms(5)), "w3");
        assert_eq!(all_due(&mut s, ms(5)), [Due::Wait("t1"), Due::Wait("w3")]);
    }

    #[test]
    fn deadlines_come_due_in_order_leases_first() {
        let mut s = S::default();
        assert_eq!(s.next_deadline(), None);
        s.enqueue(Fam::Take, "k".into(), Some(ms(30)), "late");
        s.enqueue(Fam::Take, "k".into(), Some(ms(10)), "early");
        s.track("k".into(), "L1".into(), ms(10), 7);
        s.track("j".into(), "L2".into(), ms(20), 8);
        assert_eq!(s.next_deadline(), Some(ms(10)));
        assert_eq!(s.pop_due(ms(9)), None);
        assert_eq!(
            all_due(&mut s, ms(10)),
            [Due::Lease("k".into()), Due::Wait("early")]
        );
        // A lease that came due stays tracked until forgotten.
        assert_eq!(
            s.lease("k").map(|l| (l.lease_id.as_str(), l.data)),
            Some(("L1", 7))
        );
        assert_eq!(s.waiters(Fam::Take, "k").collect::<Vec<_>>(), [&"late"]);
        assert_eq!(s.next_deadline(), Some(ms(20)));
        assert_eq!(
            all_due(&mut s, ms(100)),
            [Due::Lease("j".into()), Due::Wait("late")]
        );
        assert_eq!(s.next_deadline(), None);
        assert_eq!(s.queued(), 0);
    }

    #[test]
    fn retracking_a_lease_makes_its_old_deadline_stale() {
        let mut s = S::default();
        s.track("k".into(), "L1".into(), ms(10), 1);
        // A heartbeat: the same lease, a later deadline.
        s.track("k".into(), "L1".into(), ms(50), 1);
        assert_eq!(s.entries(), 2);
        assert_eq!(s.next_deadline(), Some(ms(50)));
        assert_eq!(s.entries(), 1, "the stale entry was dropped");
        assert_eq!(s.pop_due(ms(49)), None);
        // A new lease on the key, even with the old deadline, is a new entry.
        s.track("k".into(), "L2".into(), ms(50), 2);
        assert_eq!(all_due(&mut s, ms(50)), [Due::Lease("k".into())]);
        assert_eq!(s.lease("k").map(|l| l.lease_id.as_str()), Some("L2"));
        assert_eq!(s.leases(), 1);
    }

    #[test]
    fn forgotten_leases_and_removed_waiters_never_come_due() {
        let mut s = S::default();
        s.track("k".into(), "L1".into(), ms(10), 1);
        let gone = s.enqueue(Fam::Take, "k".into(), Some(ms(10)), "gone");
        let stays = s.enqueue(Fam::Take, "k".into(), Some(ms(20)), "stays");
        s.enqueue(Fam::Watch, "k".into(), Some(ms(10)), "closed");
        assert_ne!(gone, stays);
        assert_eq!(s.forget("k").map(|l| l.data), Some(1));
        assert_eq!(s.forget("k").map(|l| l.data), None);
        assert_eq!(s.remove(Fam::Take, "k", gone), Some("gone"));
        assert_eq!(s.remove(Fam::Take, "k", gone), None);
        s.retain(|w| *w != "closed");
        assert_eq!(s.queued(), 1);
        assert_eq!(s.next_deadline(), Some(ms(20)));
        assert_eq!(all_due(&mut s, ms(20)), [Due::Wait("stays")]);
        assert_eq!(s.remove(Fam::Take, "k", stays), None);
    }

    #[test]
    fn retain_in_one_queue_only() {
        let mut s = S::default();
        s.enqueue(Fam::Watch, "k".into(), None, "drop");
        s.enqueue(Fam::Watch, "k".into(), None, "keep");
        s.enqueue(Fam::Watch, "j".into(), None, "drop");
        s.retain_in(Fam::Watch, "k", |w| *w != "drop");
        assert_eq!(s.waiters(Fam::Watch, "k").collect::<Vec<_>>(), [&"keep"]);
        assert_eq!(s.waiters(Fam::Watch, "j").collect::<Vec<_>>(), [&"drop"]);
        assert_eq!(s.queued_in(Fam::Watch), 2);
    }

    #[test]
    fn draining_leases_and_waiters() {
        let mut s = S::default();
        s.track("k".into(), "L1".into(), ms(10), 1);
        s.enqueue(Fam::Watch, "k".into(), Some(ms(5)), "w");
        s.enqueue(Fam::Take, "k".into(), Some(ms(5)), "t");
        let leases: Vec<_> = s.drain_leases().map(|(k, l)| (k, l.lease_id)).collect();
        assert_eq!(leases, [("k".to_string(), "L1".to_string())]);
        assert_eq!(s.entries(), 2);
        assert_eq!(s.drain_waiters(), ["t", "w"]);
        assert_eq!((s.leases(), s.queued(), s.entries()), (0, 0, 0));
        assert_eq!(s.next_deadline(), None);
    }

    #[test]
    fn compaction_drops_only_stale_entries() {
        let mut s = S::default();
        for i in 1..=2000 {
            s.track("k".into(), "L1".into(), ms(i), 1);
        }
        s.enqueue(Fam::Take, "k".into(), Some(ms(3000)), "w");
        assert_eq!(s.entries(), 2001);
        s.compact();
        assert_eq!(s.entries(), 2);
        assert_eq!(
            all_due(&mut s, ms(5000)),
            [Due::Lease("k".into()), Due::Wait("w")]
        );
        // Few stale entries are left alone.
        s.track("k".into(), "L1".into(), ms(1), 1);
        s.track("k".into(), "L1".into(), ms(2), 1);
        s.compact();
        assert_eq!(s.entries(), 2);
    }
}
