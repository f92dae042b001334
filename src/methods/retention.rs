//! Retention in the background: the writer trims key history (`BATON_HISTORY_KEEP`) and
//! the journal (`BATON_JOURNAL_RETAIN`) a small step per batch, and gives freed pages back
//! to the file system, so that no step holds the writer, and every write behind it, for
//! more than a few milliseconds. Nothing is done when there is nothing to trim: whether
//! there is work is judged from the writer's memory (the head revision, the journal's
//! oldest seq as last read), not by asking storage in every batch.

use crate::config::{Config, JournalRetain};
use crate::error::Result;

use super::areas::WriteCtx;
use super::journal;

/// Rows one step of retention looks at (history) or removes (journal) at most.
pub const STEP_ROWS: u64 = 1000;
/// Free pages one step gives back to the file system at most (1 MiB of 4 KiB pages).
const RECLAIM_PAGES: u64 = 256;
/// How often retention by age looks for events that have aged out, in milliseconds of
/// the batches' wall time.
const AGE_CHECK_EVERY_MS: i64 = 1000;

/// What is kept.
#[derive(Debug, Clone, Copy)]
pub struct Retention {
    /// Versions kept per key; None keeps them all.
    pub history_keep: Option<u64>,
    pub journal: JournalRetain,
}

impl Default for Retention {
    /// Everything is kept.
    fn default() -> Retention {
        Retention {
            history_keep: None,
            journal: JournalRetain::All,
        }
    }
}

impl Retention {
    pub fn of(config: &Config) -> Retention {
        Retention {
            history_keep: config.history_keep,
            journal: config.journal_retain,
        }
    }
}

/// Where retention is, across batches.
pub struct Background {
    retention: Retention,
    /// Versions written since the start that put an older one past the versions kept
    /// ([`Background::wrote_version`]).
    trimmable: u64,
    /// The revision a pass over the history continues after, while one runs.
    history_after: Option<u64>,
    /// The head revision when the last pass began, and the versions it left: a new pass
    /// begins once as many versions were written since (at least a step's worth), so a
    /// pass costs a few rows looked at per version written.
    trimmable_at_pass: u64,
    first_pass_done: bool,
    kept_by_last_pass: u64,
    kept_by_this_pass: u64,
    /// The journal's oldest seq as last read (None: not read yet).
    journal_oldest: Option<u64>,
    /// When retention by age last looked (batch wall time).
    age_checked_ms: i64,
    /// Rows were removed: free pages may be given back.
    reclaim: bool,
}

impl Default for Background {
    /// Nothing to trim: everything is kept.
    fn default() -> Background {
        Background::new(Retention::default())
    }
}

impl Background {
    pub fn new(retention: Retention) -> Background {
        Background {
            retention,
            trimmable: 0,
            history_after: None,
            trimmable_at_pass: 0,
            first_pass_done: false,
            kept_by_last_pass: 0,
            kept_by_this_pass: 0,
            journal_oldest: None,
            age_checked_ms: i64::MIN,
            reclaim: false,
        }
    }

    /// A key's version `version` was written: past `BATON_HISTORY_KEEP` versions, one
    /// older version became retention's to remove (a pass over the history begins once
    /// enough did).
    pub fn wrote_version(&mut self, version: u64) {
        if self
            .retention
            .history_keep
            .is_some_and(|keep| version > keep)
        {
            self.trimmable += 1;
        }
    }

    /// Whether a batch with no request should run for retention (the writer does not
    /// wait for requests meanwhile).
    pub(super) fn pending(&self, head: i64, now_ms: i64) -> bool {
        self.history_due(self.trimmable) || self.journal_due(head, now_ms) || self.reclaim
    }

    /// A pass runs, or enough versions became removable since the last began: at least a
    /// step's worth and as many as the last pass kept, so a pass looks at about two
    /// versions per version it removes (with a tenth, ten cost the writer ~5 us of CPU
    /// per write under steady overwrites), the history holds at most about twice what it
    /// keeps, and no pass begins while nothing is removable (a million keys of one
    /// version each are never walked). The first pass, at start, removes what an earlier
    /// run (or a larger keep) left.
    fn history_due(&self, trimmable: u64) -> bool {
        self.retention.history_keep.is_some()
            && (self.history_after.is_some()
                || !self.first_pass_done
                || trimmable - self.trimmable_at_pass >= self.kept_by_last_pass.max(STEP_ROWS))
    }

    fn journal_due(&self, head: i64, now_ms: i64) -> bool {
        match (self.retention.journal, self.journal_oldest) {
            (JournalRetain::All, _) => false,
            (_, None) => true,
            (JournalRetain::Events(keep), Some(oldest)) => (head + 1 - keep as i64) > oldest as i64,
            (JournalRetain::Age(_), Some(_)) => {
                now_ms.saturating_sub(self.age_checked_ms) >= AGE_CHECK_EVERY_MS
            }
        }
    }

    /// The journal's oldest seq changed (CompactJournal): read it again.
    pub(super) fn forget_journal_start(&mut self) {
        self.journal_oldest = None;
    }

    /// One step of each retention that has work, inside the open batch. Returns whether
    /// rows were removed (free pages to give back).
    pub(super) fn step(&mut self, ctx: &mut WriteCtx<'_>) -> Result<()> {
        let head = ctx.head_revision();
        if self.history_due(self.trimmable) {
            self.history_step(ctx)?;
        }
        if self.journal_due(head, ctx.now_ms) {
            self.journal_step(ctx)?;
        }
        Ok(())
    }

    fn history_step(&mut self, ctx: &mut WriteCtx<'_>) -> Result<()> {
        let Some(keep) = self.retention.history_keep else {
            return Ok(());
        };
        let after = match self.history_after {
            Some(after) => after,
            None => {
                self.trimmable_at_pass = self.trimmable;
                self.kept_by_this_pass = 0;
                0
            }
        };
        let step = ctx.records().trim_history(keep, after, STEP_ROWS)?;
        self.kept_by_this_pass += step.scanned - step.removed;
        self.reclaim |= step.removed > 0;
        self.history_after = match step.last {
            Some(last) if step.scanned >= STEP_ROWS => Some(last),
            // The end of the history: the pass is over.
            _ => {
                self.kept_by_last_pass = self.kept_by_this_pass;
                self.first_pass_done = true;
                None
            }
        };
        Ok(())
    }

    fn journal_step(&mut self, ctx: &mut WriteCtx<'_>) -> Result<()> {
        let oldest = ctx.journal().oldest_seq()?;
        self.journal_oldest = Some(oldest);
        let head = ctx.head_revision().max(0) as u64;
        let before = match self.retention.journal {
            JournalRetain::All => return Ok(()),
            JournalRetain::Events(keep) => (head + 1).saturating_sub(keep),
            JournalRetain::Age(ms) => {
                self.age_checked_ms = ctx.now_ms;
                let cutoff = ctx.now_ms.saturating_sub(ms as i64);
                ctx.journal().first_seq_since(cutoff, oldest, STEP_ROWS)?
            }
        };
        if before <= oldest {
            return Ok(());
        }
        let (now_oldest, removed) = journal::compact_step(ctx, before)?;
        self.journal_oldest = Some(now_oldest);
        if matches!(self.retention.journal, JournalRetain::Age(_)) && removed > 0 {
            // More may have aged out past what this step looked at.
            self.age_checked_ms = i64::MIN;
        }
        self.reclaim |= removed > 0;
        Ok(())
    }

    /// After the steps: free pages go back to the file system, a bounded number per batch.
    pub(super) fn reclaim(
        &mut self,
        writes: &mut dyn crate::store::boundary::WriteStorage,
    ) -> Result<()> {
        if self.reclaim {
            self.reclaim = writes.reclaim(RECLAIM_PAGES)?;
        }
        Ok(())
    }

    /// Rows were removed by a request (CompactJournal, ClearNamespace): give pages back.
    pub(super) fn removed_rows(&mut self) {
        self.reclaim = true;
    }
}
